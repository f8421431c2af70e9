//! The [`Algorithm`] contract every collective algorithm implements (what it
//! supports, its wiring, its kernel, its cost terms) and what its kernel
//! receives: [`KernelArgs`] with the participants' [`Buffers`] and the
//! pipeline depth. The registry of implementations is `algorithms`.

use crate::collective::{Collective, Job};
use crate::config::{Chunks, PieceLimits};
use crate::cost::CostTerms;
use crate::group::Group;
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::machine::Tables;
use kernbench_spec::spec::SipTopology;
use kernbench_spec::topology::address::Space;

/// Where the participants' buffers are: in `space` (HBM of the cube, or the
/// PE's own TCM) at offset `base`; when every PE of a cube takes part and
/// the buffers share the cube's HBM, PE q's is `pe_stride` bytes per q further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffers {
    pub space: Space,
    pub base: u64,
    pub pe_stride: u64,
}

impl Buffers {
    /// Buffers at HBM offset `base` (PE q's at `base + q · pe_stride`).
    pub fn hbm(base: u64, pe_stride: u64) -> Self {
        Self {
            space: Space::Hbm,
            base,
            pe_stride,
        }
    }
}

/// What a collective runs on: where the buffers are and, for a lane-wise
/// communicator ([`crate::Communicator::lanes`]), the lanes that take part
/// (`None`: every participant of the communicator's group, at `buffers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operand {
    pub buffers: Buffers,
    pub lanes: Option<Vec<LaneBuffer>>,
}

/// One lane of a lane-wise collective: PE `pe` of cube `cube` of every SIP,
/// its buffer at offset `base` of `Operand::buffers`' space (the same on
/// every SIP; lanes may differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneBuffer {
    pub cube: u32,
    pub pe: u32,
    pub base: u64,
}

/// What a kernel of an algorithm receives.
#[derive(Debug, Clone)]
pub struct KernelArgs {
    pub group: Group,
    pub job: Job,
    /// Where every participant's buffer is.
    pub buffers: Buffers,
    /// Pipeline depth: fixed, or chosen per transfer ([`KernelArgs::pieces`]).
    pub chunks: Chunks,
    /// The piece sizes an `auto` depth chooses between on this system.
    pub piece_limits: PieceLimits,
}

impl KernelArgs {
    /// Pieces to cut a transfer of `elems` elements into when it crosses
    /// `stages` forwarding stages in a row (see [`Chunks::pieces`]).
    pub fn pieces(&self, elems: usize, stages: usize) -> usize {
        self.chunks.pieces(elems, stages, self.piece_limits)
    }

    /// [`Self::pieces`] for chains that cross links in opposite directions
    /// (see [`PieceLimits::crossing`]).
    pub fn crossing_pieces(&self, elems: usize, stages: usize) -> usize {
        self.chunks
            .pieces(elems, stages, self.piece_limits.crossing())
    }

    /// Piece times until piece 0 of a chain whose pieces hold `elems`
    /// elements reaches the participant `hops` hops from its head: a whole
    /// number of piece times per hop, rounded up (see
    /// [`PieceLimits::hop_in_pieces`]). Two chains that cross a link pair
    /// in opposite directions form a cycle through both participants' in-order
    /// steps, which needs their two offsets per hop to cover two hops:
    /// rounded down, one hop in two, they stall every step of the cycle.
    pub fn chain_offset(&self, elems: usize, hops: usize) -> usize {
        let hop = self.piece_limits.hop_in_pieces(elems as u64 * 2);
        hops * hop.ceil() as usize
    }

    /// This PE's buffer.
    pub fn buffer(&self, tl: &mut Tl) -> kernbench_runtime::kernel::Addr {
        let b = self.buffers;
        let pe = if self.group.pes == 1 || b.pe_stride == 0 {
            0
        } else {
            u64::from(tl.program_id(2))
        };
        kernbench_runtime::kernel::Addr::Local(b.space, b.base + pe * b.pe_stride)
    }
}

/// A collective algorithm: what it supports, its wiring, its kernel. The
/// answers most algorithms share (any topology, cube leaders only, any
/// group) are defaults; an algorithm that differs overrides them.
pub trait Algorithm: Sync {
    /// Registry name, used as `algorithm:` in ccl.yaml.
    fn name(&self) -> &'static str;
    /// One line for `--help` and reports.
    fn summary(&self) -> &'static str;
    /// The collectives its kernel runs.
    fn collectives(&self) -> &'static [Collective];
    /// The SIP topologies it runs on; by default every one
    /// ([`ANY_TOPOLOGY`]).
    fn topologies(&self) -> &'static [SipTopology] {
        ANY_TOPOLOGY
    }
    /// Whether it runs with every PE of a cube as a participant (the
    /// `all_pes` mapper), not only cube leaders (`leader_only`); by default
    /// cube leaders only.
    fn every_pe(&self) -> bool {
        false
    }
    /// Refuses a group the wiring cannot serve (a message naming the limit
    /// and the fix); checked before anything is installed. By default every
    /// group is served.
    fn check_group(&self, _g: &Group) -> Result<(), String> {
        Ok(())
    }
    /// Whether its run of collective `c` on group `g` (a ring or torus) may
    /// be folded ([`crate::fold`]): every SIP runs the same program shifted,
    /// sends only to its grid neighbours, and moves blocks of equal size
    /// when the buffer splits evenly. By default not.
    fn folds(&self, _g: &Group, _c: Collective) -> bool {
        false
    }
    /// Neighbour tables to install (the SFR configuration), per global PE
    /// index.
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables;
    /// The kernel every participant runs.
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs);
    /// What a run of collective `c` over `bytes` on `g` costs the
    /// simulator: its sends, chains, lockstep and held programs, for the
    /// estimate that refuses a run before it starts (docs/model.md §Cost
    /// estimate). `max_piece` is the most bytes a piece of a send holds (the
    /// entry's slot size, [`crate::PieceLimits`]'s `max_bytes`), for
    /// algorithms whose cut of the buffer depends on it.
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, max_piece: f64) -> CostTerms;
}

/// Every SIP topology: for [`Algorithm::topologies`] of an algorithm that
/// runs on any.
pub const ANY_TOPOLOGY: &[SipTopology] = &[
    SipTopology::Ring1d,
    SipTopology::Torus2d,
    SipTopology::Mesh2dNoWrap,
];
