//! Address resolution: a 64-bit global address names a memory
//! space, the SIP, cube and PE that own it, and an offset. Field widths are
//! the fewest bits that hold the system's largest index and memory size.
//!
//! Layout, most significant first: `space:2 | sip | cube | pe | offset`.
//! SRAM and HBM are per cube, so their `pe` field is 0.

use super::{Node, Topology};
use crate::spec::System;
use kernbench_systems::NodeId;

use kernbench_systems::program::MemLoc;
pub use kernbench_systems::program::Space;

/// A decoded address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    pub space: Space,
    pub sip: u32,
    pub cube: u32,
    pub pe: u32,
    pub offset: u64,
}

/// Encodes and decodes addresses for one system.
#[derive(Debug, Clone)]
pub struct AddressResolver {
    limits: [u64; 4],
    sizes: [u64; 3],
    bits: [u32; 4],
}

fn bits_for(n: u64) -> u32 {
    64 - n.saturating_sub(1).leading_zeros()
}

impl AddressResolver {
    /// Errors if the fields do not fit in 62 bits.
    pub fn new(sys: &System) -> Result<Self, String> {
        let m = &sys.spec.memory;
        let sizes = [m.tcm.size_bytes, m.sram.size_bytes, m.hbm.size_bytes];
        let limits = [
            sys.n_sips() as u64,
            sys.cubes_per_sip() as u64,
            sys.pes_per_cube() as u64,
            *sizes.iter().max().expect("three sizes"),
        ];
        let bits = limits.map(bits_for);
        let total: u32 = bits.iter().sum();
        if total > 62 {
            return Err(format!(
                "addresses need {total} bits for sip/cube/pe/offset ({bits:?}); at most 62 fit beside the 2-bit space; reduce memory sizes or the SIP count"
            ));
        }
        Ok(Self {
            limits,
            sizes,
            bits,
        })
    }

    pub fn encode(&self, l: Location) -> Result<u64, String> {
        let space = l.space as usize;
        let per_pe = l.space == Space::Tcm;
        let checks = [
            ("sip", l.sip as u64, self.limits[0]),
            ("cube", l.cube as u64, self.limits[1]),
            ("pe", l.pe as u64, if per_pe { self.limits[2] } else { 1 }),
            ("offset", l.offset, self.sizes[space]),
        ];
        for (name, v, limit) in checks {
            if v >= limit {
                return Err(format!(
                    "{} address {name} {v} out of range (< {limit})",
                    l.space.name()
                ));
            }
        }
        let mut a = l.space as u64;
        for (i, v) in [l.sip as u64, l.cube as u64, l.pe as u64, l.offset]
            .into_iter()
            .enumerate()
        {
            a = (a << self.bits[i]) | v;
        }
        Ok(a)
    }

    pub fn decode(&self, mut a: u64) -> Result<Location, String> {
        let mut f = [0u64; 4];
        for i in (0..4).rev() {
            f[i] = a & ((1u64 << self.bits[i]) - 1);
            a >>= self.bits[i];
        }
        let space = *Space::ALL
            .get(a as usize)
            .ok_or_else(|| format!("address space field {a} is not tcm(0), sram(1) or hbm(2)"))?;
        let l = Location {
            space,
            sip: f[0] as u32,
            cube: f[1] as u32,
            pe: f[2] as u32,
            offset: f[3],
        };
        self.encode(l)?; // range check
        Ok(l)
    }

    /// The engine's memory location of a decoded address.
    pub fn mem_loc(&self, topo: &Topology, l: Location) -> MemLoc {
        let cube = l.sip * topo.cubes_per_sip() + l.cube;
        let instance = match l.space {
            Space::Tcm => cube * topo.pes_per_cube + l.pe,
            Space::Sram | Space::Hbm => cube,
        };
        MemLoc {
            space: l.space,
            instance,
            offset: l.offset,
        }
    }

    /// The network node that serves an address: the PE for TCM, the cube's SRAM or HBM.
    pub fn node(&self, topo: &Topology, l: Location) -> NodeId {
        let (sip, cube) = (l.sip, l.cube);
        topo.id(match l.space {
            Space::Tcm => Node::Pe {
                sip,
                cube,
                pe: l.pe,
            },
            Space::Sram => Node::Sram { sip, cube },
            Space::Hbm => Node::Hbm { sip, cube },
        })
    }
}
