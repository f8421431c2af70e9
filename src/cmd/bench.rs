//! `kernbench bench`: measure the simulator (phases in `kernbench::bench`).

use super::args::{BudgetArg, NetworkArg, at_least, parse_elem_bytes};
use anyhow::{Result, bail};
use clap::Args;
use kernbench::bench::{Bench, ring_system};

#[derive(Args)]
pub struct BenchArgs {
    /// SIPs on the benchmark ring (1 cube, 1 PE each; only inter-SIP links cost time).
    #[arg(long, default_value_t = 4096, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(2..))]
    sips: u32,
    /// Rounds of ring traffic; round r+1 of a SIP starts when it received round r.
    #[arg(long, default_value_t = 8190, allow_negative_numbers = true,
          value_parser = at_least(1))]
    rounds: u64,
    /// Bytes each SIP sends per round (the ring kernel: whole f16 elements).
    #[arg(long, default_value_t = 16384, allow_negative_numbers = true,
          value_parser = at_least(1))]
    bytes: u64,
    /// Skip the 4096-SIP × 4×4-cube × 8-PE build measurement.
    #[arg(long)]
    no_build: bool,
    /// Skip the ring-traffic measurement.
    #[arg(long)]
    no_traffic: bool,
    /// Skip the ring-kernel measurement (the same ring as a kernel: send
    /// east / recv west / add, through IPCQ queues with credits, timing-only).
    #[arg(long)]
    no_kernel: bool,
    /// Also run a ring all-reduce through the collective library on the same
    /// ring (--sips SIPs) and report wall time, peak memory and the program
    /// every participant shares (the scale issue's benchmark: 64M on 4096 SIPs).
    #[arg(long)]
    collective: bool,
    /// Also run the same all-reduce through the process group (one worker
    /// per rank, `kernbench::dist`), for the runtime's overhead side by side.
    #[arg(long)]
    process_group: bool,
    /// Buffer per participant for --collective, bytes (K, M, G = 2^10, 2^20, 2^30).
    #[arg(long, default_value = "64M", allow_hyphen_values = true, value_parser = parse_elem_bytes)]
    collective_bytes: u64,
    /// IPCQ slot size for the ring kernel, in bytes of whole f16 elements
    /// (one chunk per message when it is at least --bytes).
    #[arg(long, default_value = "16384", allow_hyphen_values = true, value_parser = parse_elem_bytes)]
    slot_bytes: u64,
    /// IPCQ slots per queue for the ring kernel.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    slots: u32,
    /// The network model of every phase (packet or flow; auto has no
    /// single run to decide on here).
    #[command(flatten)]
    network: NetworkArg,
    #[command(flatten)]
    budget: BudgetArg,
}

/// Knobs that shrink a bench.
const BENCH_KNOBS: &str = "fewer --rounds or --sips, smaller --bytes or --collective-bytes, a larger --slot-bytes, or fewer phases (--no-build, --no-traffic, --no-kernel)";

pub fn run(a: BenchArgs) -> Result<()> {
    if !a.no_kernel && !a.bytes.is_multiple_of(2) {
        bail!(
            "--bytes {}: the ring kernel sends whole f16 elements; allowed: an even number of bytes, or --no-kernel",
            a.bytes
        );
    }
    let mut sys = ring_system(a.sips)?;
    a.network
        .set_fixed(&mut sys, "bench measures one network model per run")?;
    let tcm = sys.spec.memory.tcm.size_bytes;
    let area = u128::from(a.slot_bytes) * u128::from(a.slots);
    if !a.no_kernel && area > u128::from(tcm) {
        bail!(
            "--slot-bytes {} x --slots {} = {area} B of IPCQ slots per queue do not fit in a PE's TCM of {tcm} B (memory.tcm.size_bytes of ring_4096_lean); allowed: --slot-bytes x --slots at most {tcm} B, or --no-kernel",
            a.slot_bytes,
            a.slots
        );
    }
    let bench = Bench {
        sips: a.sips,
        rounds: a.rounds,
        bytes: a.bytes,
        build: !a.no_build,
        traffic: !a.no_traffic,
        kernel: !a.no_kernel,
        collective: a.collective,
        process_group: a.process_group,
        collective_bytes: a.collective_bytes,
        slot_bytes: a.slot_bytes,
        slots: a.slots,
        budget: a.budget.budget(),
    };
    let cost = bench.cost(&sys)?;
    cost.check("bench", &bench.budget, BENCH_KNOBS)
        .map_err(anyhow::Error::msg)?;
    let chunks = u64::from(a.sips)
        .checked_mul(a.rounds)
        .and_then(|m| m.checked_mul(a.bytes.div_ceil(a.slot_bytes)));
    if chunks.is_none() {
        bail!(
            "--sips {} x --rounds {} x {} chunks per send is more messages than 64 bits count; allowed: fewer --rounds",
            a.sips,
            a.rounds,
            a.bytes.div_ceil(a.slot_bytes)
        );
    }
    let weights = cost.weights();
    let progress = kernbench::progress::Progress::new("bench", "phases", &weights);
    let mut per_transfer = std::collections::BTreeMap::new();
    for (k, (phase, _)) in cost.parts.iter().enumerate() {
        let report = bench.phase(phase, &sys)?;
        print!("{}", report.text);
        if let Some(t) = report.per_transfer {
            per_transfer.insert(phase.as_str(), t);
        }
        progress.tick(weights[k], phase);
    }
    progress.finish();
    if let (Some(&traffic), Some(&kernel)) =
        (per_transfer.get("traffic"), per_transfer.get("kernel"))
        && a.bytes <= a.slot_bytes
    {
        print!(
            "{}",
            kernbench::bench::kernel_against_traffic(traffic, kernel)
        );
    }
    Ok(())
}
