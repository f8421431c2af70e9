//! [`Group`]: the participants of a collective and their arrangement (which
//! SIPs, which PEs of each cube, the SIP grid), and the arithmetic between a
//! participant's number and its physical (sip, cube, pe).

use crate::config::AlgoConfig;
use kernbench_runtime::machine::Tables;
use kernbench_spec::spec::{SipTopology, System};
use kernbench_systems::PeIdx;
use kernbench_systems::ipcq::Entry;

/// The participants and their arrangement, as kernels see it: the first
/// `pes` PEs (1: the cube leader, pe0) of every cube of `sips` SIPs. The
/// group's SIP `m` is physical SIP `first_sip + m · sip_stride`
/// (the whole machine: 0 and 1), so a group can be a tensor-parallel block
/// of neighbours or a data-parallel set of every k-th SIP. Participant
/// `p = (m · cubes + cube) · pes + pe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub sips: u32,
    /// Participating PEs per cube: 1 (cube leaders) or every PE (`all_pes`).
    pub pes: u32,
    pub first_sip: u32,
    pub sip_stride: u32,
    pub topology: SipTopology,
    /// SIP grid (w, h); ring_1d is (sips, 1).
    pub grid: (u32, u32),
    /// Cube mesh (w, h) of every SIP.
    pub cubes: (u32, u32),
    pub pes_per_cube: u32,
}

impl Group {
    pub fn new(sys: &System) -> Self {
        let s = &sys.spec;
        Self {
            sips: s.system.sips.count,
            pes: 1,
            first_sip: 0,
            sip_stride: 1,
            topology: s.system.sips.topology,
            grid: sys.sip_grid,
            cubes: (s.sip.cube_mesh.w, s.sip.cube_mesh.h),
            pes_per_cube: s.cube.pe_layout.pes(),
        }
    }

    /// Every participant's neighbour-table entries, `entries(p)` for
    /// participant p; none for a group of one (it exchanges nothing).
    pub fn wire_each(&self, entries: impl Fn(usize) -> Vec<Entry>) -> Tables {
        let n = self.size();
        (0..n)
            .filter(|_| n > 1)
            .map(|p| (self.pe(p), entries(p)))
            .collect()
    }

    /// The group of the SIPs `sips` (in the group's order): the whole machine's
    /// group when they are all SIPs in order, else a logical ring over them.
    /// They must be evenly spaced (first, first + s, first + 2s, …), which
    /// covers tensor-parallel blocks and data-parallel strides.
    pub fn of_sips(sys: &System, sips: &[u32]) -> Result<Self, String> {
        let all = Self::new(sys);
        let count = sys.spec.system.sips.count;
        if sips.is_empty() {
            return Err("a group needs at least one rank".into());
        }
        if let Some(&s) = sips.iter().find(|&&s| s >= count) {
            return Err(format!(
                "rank {s} does not exist: the world has ranks 0..{count} (one per SIP, system.sips.count)"
            ));
        }
        let stride = if sips.len() > 1 {
            sips[1].wrapping_sub(sips[0])
        } else {
            1
        };
        let even = stride >= 1
            && sips
                .iter()
                .enumerate()
                .all(|(k, &s)| s == sips[0] + k as u32 * stride);
        if !even {
            return Err(format!(
                "ranks {sips:?} are not evenly spaced in increasing order; allowed: ranks first, first + s, first + 2s, … (e.g. [0, 1, 2, 3] or [1, 5])"
            ));
        }
        if sips.len() as u32 == count {
            return Ok(all);
        }
        Ok(Self {
            sips: sips.len() as u32,
            first_sip: sips[0],
            sip_stride: stride,
            topology: SipTopology::Ring1d,
            grid: (sips.len() as u32, 1),
            ..all
        })
    }

    pub fn cubes_per_sip(&self) -> u32 {
        self.cubes.0 * self.cubes.1
    }

    /// The physical SIP of the group's SIP `m`.
    pub fn sip(&self, m: u32) -> u32 {
        self.first_sip + m * self.sip_stride
    }

    /// The index in the group of physical SIP `sip` (which must be in it).
    pub fn sip_index(&self, sip: u32) -> u32 {
        (sip - self.first_sip) / self.sip_stride
    }

    /// The whole machine's group as `config`'s mapper lays it out: cube
    /// leaders, or every PE of every cube (`all_pes`).
    pub fn for_config(sys: &System, config: &AlgoConfig) -> Self {
        let g = Self::new(sys);
        if config.mapper == "all_pes" {
            g.every_pe()
        } else {
            g
        }
    }

    /// The same SIPs with every PE of each cube taking part.
    pub fn every_pe(self) -> Self {
        Self {
            pes: self.pes_per_cube,
            ..self
        }
    }

    /// Number of participants.
    pub fn size(&self) -> usize {
        (self.sips * self.cubes_per_sip() * self.pes) as usize
    }

    /// Global PE index of participant `p`.
    pub fn pe(&self, p: usize) -> PeIdx {
        let (sip, cube, pe) = self.coords(p);
        PeIdx((sip * self.cubes_per_sip() + cube) * self.pes_per_cube + pe)
    }

    /// Physical (sip, cube, pe) of participant `p`.
    pub fn coords(&self, p: usize) -> (u32, u32, u32) {
        let (c, q) = (self.cubes_per_sip(), p as u32 / self.pes);
        (self.sip(q / c), q % c, p as u32 % self.pes)
    }

    /// Participant of physical (sip, cube, pe).
    pub fn participant_at(&self, sip: u32, cube: u32, pe: u32) -> usize {
        self.participant(self.sip_index(sip), cube) + pe as usize
    }

    /// Participant of (the group's SIP `sip`, cube), its cube's first.
    pub fn participant(&self, sip: u32, cube: u32) -> usize {
        ((sip * self.cubes_per_sip() + cube) * self.pes) as usize
    }
}
