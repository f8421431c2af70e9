//! A DDP step's backward on 4 ranks: GEMMs produce gradient buckets one
//! after another on each rank's compute stream, and each bucket is
//! all-reduced — serialized (every bucket after the backward) or
//! overlapped (asynchronously, as soon as its GEMM is done, then wait all)
//! — with the GEMMs on every PE (`owners`, today's placement, sharing pe0
//! with the collectives) or off the cube leaders' pe0 (`off-leader`).
//! Prints rank 0's compute, exposed and hidden communication, and the step.
//! ENTRY is the ccl.yaml entry of the all-reduce (default `auto`: the
//! autotuner's pick for the bucket size).
//!
//! cargo run --release --example ddp_overlap [-- BUCKETS [BUCKET_KIB [K [ENTRY]]]]

use kernbench::autotune::init_process_group;
use kernbench::ccl::CclConfig;
use kernbench::ddp::{DdpStep, ddp_step};
use kernbench::gemm::Placement;
use kernbench::spec::System;
use kernbench_systems::memory::DataMode;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let buckets: usize = args.next().map_or(Ok(4), |a| a.parse())?;
    let kib: u64 = args.next().map_or(Ok(512), |a| a.parse())?;
    let k: usize = args.next().map_or(Ok(2048), |a| a.parse())?;
    let entry = args.next().unwrap_or_else(|| "auto".into());
    let sys = System::embedded_default();
    let ccl = CclConfig::embedded_default();
    let ppc = sys.pes_per_cube();
    println!(
        "# DDP backward: {} ranks x {} cubes x {ppc} PEs, {buckets} buckets of {kib} KiB, GEMM k = {k}, all-reduce '{entry}'; rank 0, us",
        sys.spec.system.sips.count,
        sys.cubes_per_sip()
    );
    println!(
        "{:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "placement", "all-reduce", "compute", "comm", "exposed", "hidden", "step"
    );
    for (name, placement) in [
        ("owners", Placement::Owners),
        ("off-leader", Placement::off_leader(ppc)),
    ] {
        for overlap in [false, true] {
            let mut pg = init_process_group(&sys, &ccl, &entry, DataMode::TimingOnly)?;
            let step = DdpStep {
                buckets,
                bucket_bytes: kib << 10,
                k,
                placement: placement.clone(),
                overlap,
            };
            let report = ddp_step(&mut pg, &step)?;
            let b = report.ranks[0];
            let us = |t: u64| t as f64 * sys.spec.system.tick_ns / 1000.0;
            println!(
                "{name:>11} {:>11} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                if overlap { "overlapped" } else { "serialized" },
                us(b.compute),
                us(b.communication),
                us(b.communication - b.hidden),
                us(b.hidden),
                us(report.step)
            );
        }
    }
    Ok(())
}
