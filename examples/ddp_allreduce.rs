//! Data-parallel gradient all-reduce, the seeds' `ccl_allreduce` bench in
//! Rust: every rank (one per SIP) fills a gradient tensor, all-reduces it,
//! checks it element by element and prints an nccl-tests style line ending
//! with the configuration the all-reduce ran (ENTRY `auto`, the default:
//! the autotuner's pick for its size).
//!
//! cargo run --release --example ddp_allreduce [-- SIPS [ELEMS_PER_CUBE [ENTRY]]]

use kernbench::autotune::init_process_group;
use kernbench::ccl::{CclConfig, ReduceOp};
use kernbench::dist::{DPPolicy, DistError};
use kernbench::spec::System;
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let sips: u32 = args.next().map_or(Ok(4), |a| a.parse())?;
    let elems: usize = args.next().map_or(Ok(64 << 10), |a| a.parse())?;
    let entry = args.next().unwrap_or_else(|| "auto".into());
    let mut spec = System::embedded_default().spec;
    spec.system.sips.count = sips;
    (spec.system.sips.w, spec.system.sips.h) = (None, None);
    spec.system.sips.topology = kernbench::spec::SipTopology::Ring1d;
    let sys = System::from_spec(spec, "default system, ring_1d")?;
    let ccl = CclConfig::embedded_default();
    let mut pg = init_process_group(&sys, &ccl, &entry, DataMode::Functional)?;
    let cubes = sys.cubes_per_sip() as usize;
    println!(
        "# {} ranks x {cubes} cubes, {elems} f16 per cube leader, algorithm {entry}; process group ready at tick {}",
        pg.world_size, pg.init_tick
    );
    println!(
        "{:>6} {:>12} {:>12} {:>12} {:>12} {:>8}  ran",
        "rank", "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check"
    );
    let lines = Mutex::new(Vec::new());
    let n = pg.world_size;
    pg.spawn(n, |ctx| {
        let r = ctx.rank() as usize;
        let grad = ctx.empty((cubes, elems), DPPolicy::cube_replicas(cubes as u32))?;
        // Cube c of rank r holds (r + c + i) mod 4: small integers, exact in f16.
        let value = |r: usize, c: usize, i: usize| ((r + c + i) % 4) as f32;
        let data: Vec<f32> = (0..cubes * elems)
            .map(|k| value(r, k / elems, k % elems))
            .collect();
        ctx.write(&grad, &data)?;
        let res = ctx.all_reduce(&grad, ReduceOp::Sum)?;
        let got = ctx.read(&grad)?;
        let ok = (0..cubes * elems).all(|k| {
            let i = k % elems;
            let want: f32 = (0..n as usize)
                .flat_map(|q| (0..cubes).map(move |c| (q, c)))
                .map(|(q, c)| value(q, c, i))
                .sum();
            got[k] == want
        });
        if !ok {
            return Err(DistError::Run(format!(
                "rank {r}: all-reduce result is wrong"
            )));
        }
        lines.lock().unwrap().push(format!(
            "{r:>6} {:>12} {:>12.3} {:>12.2} {:>12.2} {:>8}  {}",
            res.bytes,
            res.time_ns / 1000.0,
            res.algbw_gbps,
            res.busbw_gbps,
            "ok",
            res.algorithm
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
