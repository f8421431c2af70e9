//! [`Group`]: the participants of a collective and their arrangement (which
//! SIPs in which order, which PEs of each cube, the SIP grid), and the
//! arithmetic between a participant's number and its physical (sip, cube, pe).
//! A group can also be one [`Lane`]: the same (cube, pe) of each of its SIPs.

use crate::config::AlgoConfig;
use crate::kernels::grid_cycle;
use kernbench_runtime::machine::Tables;
use kernbench_spec::spec::{SipTopology, System};
use kernbench_systems::PeIdx;
use kernbench_systems::ipcq::Entry;
use std::sync::Arc;

/// The participants and their arrangement, as kernels see it: the first
/// `pes` PEs (1: the cube leader, pe0) of every cube of the SIPs `sips`, in
/// group order. The group's SIP `m` is physical SIP `sips[m]` (the whole
/// machine: 0, 1, 2, …), so a group can be a tensor-parallel block, a
/// data-parallel set of every k-th SIP or any list of SIPs. Participant
/// `p = (m · cubes + cube) · pes + pe`; participant 0 is the root of a
/// broadcast or reduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The physical SIP of each of the group's SIPs, in group order; shared,
    /// so a copy of the group allocates nothing.
    pub sips: Arc<[u32]>,
    /// Participating PEs per cube: 1 (cube leaders) or every PE (`all_pes`).
    pub pes: u32,
    /// How the group's SIPs are arranged: the machine's SIP topology for
    /// the whole machine (or a shift of it), ring_1d for a logical ring.
    pub topology: SipTopology,
    /// SIP grid (w, h) of the arrangement; a ring is (sips, 1).
    pub grid: (u32, u32),
    /// Cube mesh (w, h) of every SIP.
    pub cubes: (u32, u32),
    pub pes_per_cube: u32,
    /// Some when the group is one lane ([`Group::lane_of`]): its
    /// participants are PE `pe` of cube `cube` of each of its SIPs, one per
    /// SIP (`cubes` is then (1, 1) and `pes` 1, so every algorithm sees
    /// one-cube SIPs).
    pub lane: Option<Lane>,
    /// Logical SIPs per simulated SIP along x and y ([`System::fold`]):
    /// the group's SIP (x, y) runs on simulated SIP (x mod w', y mod h') of
    /// the w' × h' machine, and only the first w' × h' window is simulated.
    pub fold: (u32, u32),
}

/// Where the participants of a one-lane group sit in their SIPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    pub cube: u32,
    pub pe: u32,
    /// Cubes per SIP of the machine, for the global PE numbering.
    pub machine_cubes: u32,
}

impl Group {
    pub fn new(sys: &System) -> Self {
        let s = &sys.spec;
        let (pw, ph) = sys.sip_grid;
        let (w, h) = (pw * sys.fold.0, ph * sys.fold.1);
        Self {
            sips: (0..w * h).map(|m| (m / w % ph) * pw + m % w % pw).collect(),
            pes: 1,
            topology: s.system.sips.topology,
            grid: (w, h),
            cubes: (s.sip.cube_mesh.w, s.sip.cube_mesh.h),
            pes_per_cube: s.cube.pe_layout.pes(),
            lane: None,
            fold: sys.fold,
        }
    }

    /// Whether the group stands for more SIPs than it simulates.
    pub fn is_folded(&self) -> bool {
        self.fold != (1, 1)
    }

    /// The participants simulated: all of them, or in a folded group those
    /// of the SIPs in the first window of the simulated grid's size.
    pub fn simulated(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.size()).filter(move |&p| self.simulates(p))
    }

    /// Whether participant `p` is simulated (see [`Group::simulated`]).
    pub fn simulates(&self, p: usize) -> bool {
        let per_sip = (self.cubes_per_sip() * self.pes) as usize;
        self.simulates_sip((p / per_sip) as u32)
    }

    /// Whether the group's SIP `m` is simulated: in the first window of the
    /// simulated grid's size (see [`Group::simulated`]).
    pub fn simulates_sip(&self, m: u32) -> bool {
        let (pw, ph) = self.simulated_grid();
        m % self.grid.0 < pw && m / self.grid.0 < ph
    }

    /// The grid of SIPs simulated: the group's own, divided by the fold.
    pub fn simulated_grid(&self) -> (u32, u32) {
        (self.grid.0 / self.fold.0, self.grid.1 / self.fold.1)
    }

    /// Number of participants simulated.
    pub fn simulated_size(&self) -> usize {
        self.size() / (self.fold.0 * self.fold.1) as usize
    }

    /// The lane of PE `pe` of cube `cube`: one participant per SIP of this
    /// group, in its order and arrangement (a lane-wise collective runs one
    /// collective per lane, all lanes at once).
    pub fn lane_of(&self, cube: u32, pe: u32) -> Self {
        Self {
            cubes: (1, 1),
            pes: 1,
            lane: Some(Lane {
                cube,
                pe,
                machine_cubes: self.machine_cubes(),
            }),
            ..self.clone()
        }
    }

    /// Every lane of this group: each cube's participating PEs, in (cube,
    /// pe) order; they use disjoint PEs.
    pub fn lanes(&self) -> Vec<Self> {
        (0..self.cubes_per_sip())
            .flat_map(|c| (0..self.pes).map(move |p| (c, p)))
            .map(|(c, p)| self.lane_of(c, p))
            .collect()
    }

    /// Cubes per SIP of the machine (of the arrangement, unless one lane).
    pub fn machine_cubes(&self) -> u32 {
        self.lane.map_or(self.cubes_per_sip(), |l| l.machine_cubes)
    }

    /// Every participant's neighbour-table entries, `entries(p)` for
    /// participant p; none for a group of one (it exchanges nothing).
    pub fn wire_each(&self, entries: impl Fn(usize) -> Vec<Entry>) -> Tables {
        let n = self.size();
        self.simulated()
            .filter(|_| n > 1)
            .map(|p| (self.pe(p), entries(p)))
            .collect()
    }

    /// The group of the SIPs `sips`, in the order given (torch's
    /// `new_group(ranks)`): the whole machine's group when they are every
    /// SIP in order, else a logical ring over them in that order. Each SIP
    /// must exist and appear once.
    pub fn of_sips(sys: &System, sips: &[u32]) -> Result<Self, String> {
        let all = Self::new(sys);
        let count = all.sip_count();
        if sips.is_empty() {
            return Err(format!(
                "a group needs at least one rank; allowed: a list of distinct ranks from 0..{count}, e.g. [0, 1]"
            ));
        }
        if let Some(&s) = sips.iter().find(|&&s| s >= count) {
            return Err(format!(
                "rank {s} does not exist: the world has ranks 0..{count} (one per SIP, system.sips.count); allowed: ranks below {count}"
            ));
        }
        let mut seen = vec![false; count as usize];
        if let Some(&s) = sips
            .iter()
            .find(|&&s| std::mem::replace(&mut seen[s as usize], true))
        {
            return Err(format!(
                "rank {s} appears twice in {sips:?}; allowed: each rank once (the list's order is the group's rank order): remove the repeated {s}"
            ));
        }
        if *sips == *all.sips {
            return Ok(all);
        }
        Ok(all.logical_ring(sips.into()))
    }

    /// The same cubes and PEs over `sips` arranged as a logical ring in
    /// that order.
    fn logical_ring(self, sips: Arc<[u32]>) -> Self {
        Self {
            topology: SipTopology::Ring1d,
            grid: (sips.len() as u32, 1),
            sips,
            ..self
        }
    }

    /// The same participants with the group's SIP `m` first, so that the
    /// root of a broadcast or reduce (participant 0) is that SIP's first
    /// cube and every algorithm written for root 0 serves root `m`. A torus
    /// shifts, keeping every neighbour; a ring turns ([`Group::ring_from`]);
    /// a mesh has no shift that keeps it a mesh, so its SIPs become the
    /// logical ring along its cycle.
    pub fn rooted_at(&self, m: u32) -> Self {
        if m == 0 {
            return self.clone();
        }
        if self.topology != SipTopology::Torus2d {
            return self.ring_from(m);
        }
        let (w, h) = (self.grid.0 as usize, self.grid.1 as usize);
        let (mx, my) = (m as usize % w, m as usize / w);
        let shifted = |k: usize| ((k / w + my) % h) * w + (k % w + mx) % w;
        Self {
            sips: (0..self.sips.len())
                .map(|k| self.sips[shifted(k)])
                .collect(),
            ..self.clone()
        }
    }

    /// The group's SIPs as a logical ring along its grid's cycle (the order
    /// `ring` visits them in; a ring's own order), starting at its SIP `m`.
    pub fn ring_from(&self, m: u32) -> Self {
        let n = self.sips.len();
        let cycle = grid_cycle(self.grid.0, self.grid.1);
        let start = cycle.iter().position(|&s| s == m).unwrap_or(0);
        let sips = (0..n).map(|k| self.sips[cycle[(start + k) % n] as usize]);
        self.clone().logical_ring(sips.collect())
    }

    pub fn cubes_per_sip(&self) -> u32 {
        self.cubes.0 * self.cubes.1
    }

    /// Number of SIPs in the group.
    pub fn sip_count(&self) -> u32 {
        self.sips.len() as u32
    }

    /// The physical SIP of the group's SIP `m`.
    pub fn sip(&self, m: u32) -> u32 {
        self.sips[m as usize]
    }

    /// The index in the group of physical SIP `sip`, which must be in it
    /// (at once when the group's SIP `sip` is `sip`, as in the whole
    /// machine's group; in a folded group, the SIP of the first window it
    /// runs).
    pub fn sip_index(&self, sip: u32) -> u32 {
        if self.sips.get(sip as usize) == Some(&sip) {
            return sip;
        }
        if self.is_folded() {
            let pw = self.simulated_grid().0;
            return sip / pw * self.grid.0 + sip % pw;
        }
        let m = self.sips.iter().position(|&s| s == sip);
        m.expect("a participant's SIP is one of its group's") as u32
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
        (self.sip_count() * self.cubes_per_sip() * self.pes) as usize
    }

    /// Global PE index of participant `p`.
    pub fn pe(&self, p: usize) -> PeIdx {
        let (sip, cube, pe) = self.coords(p);
        PeIdx((sip * self.machine_cubes() + cube) * self.pes_per_cube + pe)
    }

    /// Physical (sip, cube, pe) of participant `p`.
    pub fn coords(&self, p: usize) -> (u32, u32, u32) {
        let (c, q) = (self.cubes_per_sip(), p as u32 / self.pes);
        match self.lane {
            Some(l) => (self.sip(q / c), l.cube, l.pe),
            None => (self.sip(q / c), q % c, p as u32 % self.pes),
        }
    }

    /// Participant of physical (sip, cube, pe) (in a one-lane group, of
    /// the lane's PE of `sip`).
    pub fn participant_at(&self, sip: u32, cube: u32, pe: u32) -> usize {
        match self.lane {
            Some(_) => self.participant(self.sip_index(sip), 0),
            None => self.participant(self.sip_index(sip), cube) + pe as usize,
        }
    }

    /// Participant of (the group's SIP `sip`, cube), its cube's first.
    pub fn participant(&self, sip: u32, cube: u32) -> usize {
        ((sip * self.cubes_per_sip() + cube) * self.pes) as usize
    }
}
