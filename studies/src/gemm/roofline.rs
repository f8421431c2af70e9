//! The roofline of a GEMM on the PEs that compute it: no schedule can
//! finish before its MAC arrays have done every multiply-accumulate, nor
//! before the memory ports have moved every operand byte once
//! (docs/model.md §GEMM gives the derivation and the constants).

use kernbench_dist::Tensor;
use kernbench_spec::spec::SystemSpec;
use kernbench_spec::topology::address::Space;
use std::collections::BTreeSet;

/// A GEMM's lower bound and the two terms it is the larger of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// m · n · k.
    pub macs: u64,
    /// PEs that compute ([`super::workers`]).
    pub pes: u32,
    /// macs / (pes · pe.macs_per_tick) ticks, in ns.
    pub compute_ns: f64,
    /// The slowest memory: bytes it must move / (its instances · bandwidth).
    pub memory_ns: f64,
    /// Peak f16 throughput of those PEs, TFLOP/s (2 flops per MAC).
    pub peak_tflops: f64,
}

impl Roofline {
    /// The bound: the larger term.
    pub fn bound_ns(&self) -> f64 {
        self.compute_ns.max(self.memory_ns)
    }

    /// Which term sets the bound.
    pub fn bound_by(&self) -> &'static str {
        if self.compute_ns >= self.memory_ns {
            "compute"
        } else {
            "memory"
        }
    }
}

/// The roofline of C = A · B with these tensors' layouts.
pub fn roofline(spec: &SystemSpec, a: &Tensor, b: &Tensor, c: &Tensor) -> Roofline {
    let (m, k, n) = (a.shape.0 as u64, a.shape.1 as u64, b.shape.1 as u64);
    let macs = m * n * k * a.dtype.mac_passes();
    let owners = super::workers(
        super::Operand::plain(a),
        c,
        spec.cube.pe_layout.pes(),
        &super::Placement::Owners,
        None,
    );
    let pes = owners.map_or(1, |w| w.len()) as u32;
    let tick = spec.system.tick_ns;
    let per_tick = spec.pe.macs_per_tick * u64::from(pes);
    let compute_ns = macs.div_ceil(per_tick) as f64 * tick;
    let memory_ns = Space::ALL
        .iter()
        .map(|&space| {
            let on: Vec<&Tensor> = [a, b, c].into_iter().filter(|t| t.space == space).collect();
            let bytes: u64 = on.iter().map(|t| t.nbytes()).sum();
            let ports: BTreeSet<(u32, u32)> = on
                .iter()
                .flat_map(|t| t.shards.iter())
                .map(|s| (s.cube, if space == Space::Tcm { s.pe } else { 0 }))
                .collect();
            let mem = match space {
                Space::Tcm => &spec.memory.tcm,
                Space::Sram => &spec.memory.sram,
                Space::Hbm => &spec.memory.hbm,
            };
            if bytes == 0 || mem.ideal {
                return 0.0;
            }
            bytes as f64 / (ports.len() as f64 * mem.bandwidth_gbps)
        })
        .fold(0.0, f64::max);
    let peak_tflops = 2.0 * per_tick as f64 / tick / 1e3 / a.dtype.mac_passes() as f64;
    Roofline {
        macs: m * n * k,
        pes,
        compute_ns,
        memory_ns,
        peak_tflops,
    }
}
