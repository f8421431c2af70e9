//! The collective library: an algorithm contract, the centre-root hierarchical
//! all-reduce and its bandwidth-optimal successors.
//!
//! Participants are the pe0 of every cube of every SIP (the per-cube
//! data-parallel replica layout): participant `p = sip · cubes + cube`.
//! Each holds a vector of `elems` f16 in its cube's HBM at offset 0; a
//! collective works in place there (docs/model.md §Collectives gives the
//! layout of each collective). An [`Algorithm`] declares what it supports,
//! its IPCQ wiring and its kernel; a [`Communicator`] installs the wiring
//! once on a machine (like NCCL communicator creation), in a queue scope of
//! its own, and runs collectives on it.

pub mod algorithms;
pub mod bound;
pub mod config;
pub mod cost;
pub mod estimate;
pub mod kernels;
pub mod placement;

use cost::CostTerms;
use half::f16;
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::machine::{InstallError, LaunchError, LaunchHandle, Machine, Tables};
use kernbench_spec::spec::{SipTopology, System};
use kernbench_spec::topology::address::{Location, Space};
use kernbench_systems::PeIdx;
use kernbench_systems::ipcq::{Entry, Scope};
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::Launch;
use kernbench_systems::{RunError, Tick};
use serde::{Deserialize, Serialize};
use std::fmt;

pub use config::{AUTO, AlgoConfig, CclConfig, Chunks, PieceLimits};
pub use placement::Placement;

/// A collective operation.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast,
    Reduce,
    AllToAll,
}

impl Collective {
    pub const ALL: [Collective; 6] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
    ];

    /// Every collective but all-to-all: what a ring (reduce-scatter,
    /// all-gather) and its chains (broadcast, reduce) implement.
    pub const RING: [Collective; 5] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::Reduce,
    ];

    pub fn name(self) -> &'static str {
        [
            "all_reduce",
            "reduce_scatter",
            "all_gather",
            "broadcast",
            "reduce",
            "all_to_all",
        ][self as usize]
    }

    /// nccl-tests bus-bandwidth factor for `n` participants.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::Reduce => 1.0,
        }
    }

    pub fn reduces(self) -> bool {
        !matches!(
            self,
            Collective::AllGather | Collective::Broadcast | Collective::AllToAll
        )
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The reduction of reducing collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        ["sum", "max", "min"][self as usize]
    }

    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

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

/// One collective call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub collective: Collective,
    pub op: ReduceOp,
    /// f16 elements of each participant's buffer (the nccl "count"; for
    /// all-gather and reduce-scatter, of the full buffer).
    pub elems: usize,
}

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

impl Job {
    pub fn bytes(&self) -> u64 {
        self.elems as u64 * 2
    }

    /// The f16 element count of a buffer of `bytes` per participant: a size
    /// must be a positive whole number of elements. Err is (problem, allowed).
    pub fn elems_of(bytes: u64) -> Result<usize, (String, String)> {
        if bytes == 0 || !bytes.is_multiple_of(2) {
            return Err((
                format!("{bytes} B is not a positive whole number of f16 elements"),
                "an even number of bytes >= 2 (2 bytes per element), e.g. 1K, 64M".into(),
            ));
        }
        usize::try_from(bytes / 2).map_err(|_| {
            (
                format!("{bytes} B is too large for this machine"),
                "a smaller size".into(),
            )
        })
    }

    /// Checks the job against its pipeline depth before anything runs:
    /// `chunks` may not exceed the elements of the buffer (beyond that every
    /// extra piece is empty and only costs simulation time).
    pub fn check(&self, chunks: u32) -> Result<(), (String, String)> {
        Self::elems_of(self.bytes())?;
        if chunks as usize > self.elems {
            return Err((
                format!(
                    "chunks {chunks} is more than the {} elements of the buffer",
                    self.elems
                ),
                format!(
                    "chunks from 1 to {} at this size, or a larger size",
                    self.elems
                ),
            ));
        }
        Ok(())
    }
}

/// What a kernel of an algorithm receives.
#[derive(Debug, Clone, Copy)]
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

/// A collective algorithm: what it supports, its wiring, its kernel.
pub trait Algorithm: Sync {
    /// Registry name, used as `algorithm:` in ccl.yaml.
    fn name(&self) -> &'static str;
    /// One line for `--help` and reports.
    fn summary(&self) -> &'static str;
    /// The collectives its kernel runs.
    fn collectives(&self) -> &'static [Collective];
    /// The SIP topologies it runs on.
    fn topologies(&self) -> &'static [SipTopology];
    /// Whether it runs with every PE of a cube as a participant (the
    /// `all_pes` mapper), not only cube leaders (`leader_only`).
    fn every_pe(&self) -> bool;
    /// Refuses a group the wiring cannot serve (a message naming the limit
    /// and the fix); checked before anything is installed.
    fn check_group(&self, g: &Group) -> Result<(), String>;
    /// Neighbour tables to install (the SFR configuration), per global PE
    /// index.
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables;
    /// The kernel every participant runs.
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs);
    /// What a run of collective `c` over `bytes` on `g` costs the
    /// simulator: its sends, chains, lockstep and held programs, for the
    /// estimate that refuses a run before it starts (docs/model.md §Cost
    /// estimate).
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64) -> CostTerms;
}

/// Every SIP topology: for [`Algorithm::topologies`] of an algorithm that
/// runs on any.
pub const ANY_TOPOLOGY: &[SipTopology] = &[
    SipTopology::Ring1d,
    SipTopology::Torus2d,
    SipTopology::Mesh2dNoWrap,
];

/// Why a collective could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CclError {
    #[error("algorithm '{algorithm}' does not support {what}; it supports {supported}")]
    Unsupported {
        /// The algorithm as the config names it (an alias stays as written).
        algorithm: String,
        what: String,
        supported: String,
    },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Measures of one collective run (nccl-tests definitions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollResult {
    pub collective: Collective,
    pub algorithm: String,
    pub op: ReduceOp,
    pub participants: usize,
    pub bytes: u64,
    pub elems: usize,
    /// First PE start to last PE finish, in ticks and ns.
    pub ticks: Tick,
    pub time_ns: f64,
    /// bytes / time, GB/s.
    pub algbw_gbps: f64,
    /// algbw × the collective's bus factor.
    pub busbw_gbps: f64,
    /// The α-β lower bound of this system and collective, ticks.
    pub bound_ticks: Tick,
    /// The term that sets it: participant port, cube links, SIP lanes, HBM
    /// port, bisection (all-to-all) or latency (docs/model.md §The α-β
    /// lower bound).
    pub bound_term: String,
    /// bound / time × 100.
    pub pct_of_bound: f64,
    /// Some(true) when every participant's output matched the reference.
    pub verified: Option<bool>,
}

/// An algorithm's wiring installed on a group of a machine: a view of the
/// machine with its own queue scope, like an NCCL communicator. The machine
/// stays the caller's; several communicators share it.
///
/// A *participant* is one PE taking part in the communicator's collectives
/// (a cube's leader pe0, or every PE of the cube under `all_pes`), numbered
/// `p` in [`Group`] order; each holds its own buffer and runs the kernel. It
/// is not a rank: a rank of a process group (the distributed runtime above this crate) is a SIP that
/// drives all of its SIP's participants (one PE only in the legacy rank =
/// flat PE mode).
#[derive(Clone)]
pub struct Communicator {
    pub group: Group,
    pub config: AlgoConfig,
    pub algorithm: &'static dyn Algorithm,
    /// The queue scope its wiring and launches use.
    pub scope: Scope,
}

impl Communicator {
    /// Installs the algorithm's wiring over every SIP of the machine. Fails
    /// loudly on a SIP topology the algorithm does not support.
    pub fn new(machine: &mut Machine, config: &AlgoConfig) -> Result<Self, CclError> {
        let group = Group::for_config(&machine.system, config);
        Self::with_group(machine, config, group, &config.name)
    }

    /// Installs the algorithm's wiring over `group`, as communicator `name`.
    pub fn with_group(
        machine: &mut Machine,
        config: &AlgoConfig,
        group: Group,
        name: &str,
    ) -> Result<Self, CclError> {
        Self::with_queues(machine, config, group, name, None)
    }

    /// As [`Communicator::with_group`], with each SIP's receive queues shaped
    /// by `queues(sip)` instead of `config` (a heterogeneous group, where a
    /// rank lacking the chosen config runs a fallback: the kernels, and so
    /// the pieces sent, stay `config`'s; a queue's slots, credits and chunk
    /// size are its receiver's).
    pub fn with_queues(
        machine: &mut Machine,
        config: &AlgoConfig,
        group: Group,
        name: &str,
        queues: Option<&dyn Fn(u32) -> QueueConfig>,
    ) -> Result<Self, CclError> {
        let (comm, tables) = Self::prepare(machine, config, group, name, queues)?;
        machine.land_scope(comm.scope, tables, 0)?;
        Ok(comm)
    }

    /// What [`Communicator::with_queues`] does before simulated time passes:
    /// checks the algorithm against the group, opens the scope and places
    /// its queues' slot areas. The returned tables still have to land
    /// ([`Machine::land_scope`]) before the communicator runs anything: the
    /// process group lands them when it hands work to the engine.
    pub fn prepare(
        machine: &mut Machine,
        config: &AlgoConfig,
        group: Group,
        name: &str,
        queues: Option<&dyn Fn(u32) -> QueueConfig>,
    ) -> Result<(Self, Tables), CclError> {
        let algorithm = algorithms::find(&config.algorithm)?;
        if group.pes > 1 && !algorithm.every_pe() {
            return Err(CclError::Unsupported {
                algorithm: config.algorithm.clone(),
                what: "every PE of a cube as a participant (mapper all_pes)".into(),
                supported: "cube leaders only (mapper leader_only); ring and tree run on every PE"
                    .into(),
            });
        }
        let topo = group.topology;
        if !algorithm.topologies().contains(&topo) {
            return Err(CclError::Unsupported {
                algorithm: config.algorithm.clone(),
                what: format!("SIP topology {}", topo.name()),
                supported: algorithm
                    .topologies()
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        algorithm.check_group(&group).map_err(|e| {
            CclError::Config(format!("{} ({}): {e}", config.name, config.algorithm))
        })?;
        let q = config.queues();
        let scope = machine.open_scope(name);
        let mut tables = algorithm.wiring(&group, &q);
        if let Some(queues) = queues {
            // A queue's slots, credits and chunk size are its receiver's own.
            let per_sip = (group.cubes_per_sip() * group.pes_per_cube).max(1);
            for (pe, entries) in &mut tables {
                let own = queues(pe.0 / per_sip);
                for e in entries.iter_mut() {
                    (e.buffer, e.n_slots, e.slot_size) = (own.buffer, own.n_slots, own.slot_size);
                }
            }
        }
        let tables = machine.place_scope(scope, tables)?;
        let comm = Self {
            group,
            config: config.clone(),
            algorithm,
            scope,
        };
        Ok((comm, tables))
    }

    /// Refuses a job this communicator cannot run (see
    /// [`Communicator::check_before_build`], then the exact free HBM below
    /// the slot areas) before any simulation.
    pub fn check(&self, machine: &Machine, job: &Job) -> Result<(), CclError> {
        Self::check_before_build(&machine.system, &self.config, job)?;
        self.check_blocks(job)?;
        self.check_buffer_fits(machine, job)
    }

    /// All-to-all exchanges `n` equal blocks of whole elements: its size
    /// must be a multiple of `n` elements (nccl's count per peer).
    fn check_blocks(&self, job: &Job) -> Result<(), CclError> {
        let n = self.group.size();
        if job.collective != Collective::AllToAll || job.elems.is_multiple_of(n) {
            return Ok(());
        }
        let unit = n as u64 * 2;
        let below = job.bytes() / unit * unit;
        let nearest = if below == 0 {
            format!("{unit} B")
        } else {
            format!("{below} B or {} B", below + unit)
        };
        Err(CclError::Config(format!(
            "{}: all_to_all of {} B per participant over {n} participants: the buffer must split into {n} equal blocks of whole f16 elements; allowed: a multiple of {unit} B ({n} participants x 2 B), e.g. {nearest}",
            self.config.name,
            job.bytes(),
        )))
    }

    /// What can be refused from the spec alone, before a machine is built:
    /// an unsupported collective, chunks past the buffer's elements, a
    /// buffer larger than a cube's whole HBM.
    pub fn check_before_build(
        sys: &System,
        config: &AlgoConfig,
        job: &Job,
    ) -> Result<(), CclError> {
        Self::supports(config, job.collective)?;
        job.check(config.chunks.fixed().unwrap_or(1))
            .map_err(|(problem, allowed)| {
                CclError::Config(format!("{}: {problem}; allowed: {allowed}", config.name))
            })?;
        let hbm = sys.spec.memory.hbm.size_bytes;
        if job.bytes() > hbm {
            return Err(CclError::Config(format!(
                "{} of {} B per participant does not fit in a cube's HBM of {hbm} B (memory.hbm.size_bytes); allowed: at most {hbm} B per participant, less the IPCQ slot areas placed there: a smaller size, or a larger memory.hbm.size_bytes",
                job.collective,
                job.bytes(),
            )));
        }
        Ok(())
    }

    /// Each participant's buffer sits at offset 0 of its cube's HBM, below
    /// every allocation there: it must fit in what is free.
    fn check_buffer_fits(&self, machine: &Machine, job: &Job) -> Result<(), CclError> {
        let m = &machine.memory;
        let tightest = (0..self.group.size())
            .map(|p| {
                let hbm = m.instance_of(Space::Hbm, self.group.pe(p));
                (m.free_below(Space::Hbm, hbm), hbm)
            })
            .min();
        let Some((free, hbm)) = tightest else {
            return Ok(());
        };
        if job.bytes() <= free {
            return Ok(());
        }
        Err(CclError::Config(format!(
            "{} of {} B per participant does not fit in {}: each participant's buffer sits at offset 0 of its cube's HBM, below the IPCQ slot areas, and {free} B are free there (memory.hbm.size_bytes = {} B); allowed: at most {free} B per participant: a smaller size, or a larger memory.hbm.size_bytes",
            job.collective,
            job.bytes(),
            m.instance_name(Space::Hbm, hbm),
            m.size(Space::Hbm),
        )))
    }

    /// Whether the configured algorithm implements `collective` (checked before
    /// anything is built, so a bad combination fails at once).
    pub fn supports(config: &AlgoConfig, collective: Collective) -> Result<(), CclError> {
        let algorithm = algorithms::find(&config.algorithm)?;
        if !algorithm.collectives().contains(&collective) {
            return Err(CclError::Unsupported {
                algorithm: config.algorithm.clone(),
                what: format!("the {collective} collective"),
                supported: algorithm
                    .collectives()
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(())
    }

    fn launch_args(&self, sys: &System, job: Job, buffers: Buffers) -> (Vec<PeIdx>, KernelArgs) {
        let pes: Vec<PeIdx> = (0..self.group.size()).map(|p| self.group.pe(p)).collect();
        let args = KernelArgs {
            group: self.group,
            job,
            buffers,
            chunks: self.config.chunks,
            piece_limits: PieceLimits::of(sys, &self.config),
        };
        (pes, args)
    }

    /// The programs a collective runs, per participant's PE, without running
    /// it: what sharing and loops make of the algorithm's kernel.
    pub fn programs(&self, machine: &Machine, job: Job) -> Result<Vec<(PeIdx, Launch)>, CclError> {
        self.check(machine, &job)?;
        let (pes, args) =
            self.launch_args(&machine.system, job, Buffers::hbm(0, Self::pe_stride(&job)));
        Ok(machine.trace(self.algorithm.kernel(), &args, &pes)?)
    }

    /// Buffers of the PEs of one cube, for runs that place them (offset 0
    /// up): one after another, 64-byte aligned.
    fn pe_stride(job: &Job) -> u64 {
        job.bytes()
            .next_multiple_of(kernbench_runtime::memory_map::BUFFER_ALIGN)
    }

    /// Sends the collective's launch on `buffers` from tick `at`;
    /// [`Machine::wait`] runs it.
    pub fn submit(
        &self,
        machine: &mut Machine,
        job: Job,
        buffers: Buffers,
        at: Tick,
    ) -> Result<LaunchHandle, CclError> {
        let programs = self.trace_job(machine, job, buffers)?;
        Ok(machine.submit_programs(programs, self.scope, at))
    }

    /// The programs of `job` on `buffers`, per participant's PE.
    pub fn trace_job(
        &self,
        machine: &Machine,
        job: Job,
        buffers: Buffers,
    ) -> Result<Vec<(PeIdx, Launch)>, CclError> {
        Self::check_before_build(&machine.system, &self.config, &job)?;
        self.check_blocks(&job)?;
        let (pes, args) = self.launch_args(&machine.system, job, buffers);
        Ok(machine.trace(self.algorithm.kernel(), &args, &pes)?)
    }

    /// Runs one collective on buffers at HBM offset 0, after everything
    /// submitted before it; in functional mode also writes inputs and
    /// checks outputs.
    pub fn run(&self, machine: &mut Machine, job: Job) -> Result<CollResult, CclError> {
        let functional = self.prepare_run(machine, &job)?;
        let h = self.submit(machine, job, Buffers::hbm(0, Self::pe_stride(&job)), 0)?;
        // Run to the end (its last credits included), so runs do not overlap.
        machine.synchronize()?;
        let ticks = machine.wait(h)?.ticks();
        let verified = functional.then(|| self.outputs_match(machine, &job));
        Ok(self.result(machine, job, ticks, verified))
    }

    /// Checks `job` and, in functional mode, writes the inputs; returns
    /// whether the run carries values.
    fn prepare_run(&self, machine: &mut Machine, job: &Job) -> Result<bool, CclError> {
        self.check(machine, job)?;
        let functional = *machine.engine.world.resource::<DataMode>() == DataMode::Functional;
        let n = self.group.size();
        if functional && n > verify::MAX_PARTICIPANTS {
            return Err(CclError::Config(format!(
                "verifying {n} participants: the reference is exact for at most {} (inputs 0 to 3 summed in f16, exact up to 2048); allowed: run without --verify, or fewer SIPs or cubes",
                verify::MAX_PARTICIPANTS
            )));
        }
        if functional {
            self.write_inputs(machine, job)?;
        }
        Ok(functional)
    }

    /// The measures of a run of `job` that took `ticks`.
    pub fn result(
        &self,
        machine: &Machine,
        job: Job,
        ticks: Tick,
        verified: Option<bool>,
    ) -> CollResult {
        let sys = &machine.system;
        let bound = bound::lower_bound(machine, sys, &self.group, &job);
        let bound_ticks = bound.ticks;
        let time_ns = ticks as f64 * sys.spec.system.tick_ns;
        let n = self.group.size();
        let algbw = if time_ns > 0.0 {
            job.bytes() as f64 / time_ns
        } else {
            0.0
        };
        CollResult {
            collective: job.collective,
            algorithm: self.config.name.clone(),
            op: job.op,
            participants: n,
            bytes: job.bytes(),
            elems: job.elems,
            ticks,
            time_ns,
            algbw_gbps: algbw,
            busbw_gbps: algbw * job.collective.bus_factor(n),
            bound_ticks,
            bound_term: bound.limiting().into(),
            pct_of_bound: if ticks > 0 {
                bound_ticks as f64 / ticks as f64 * 100.0
            } else {
                100.0
            },
            verified,
        }
    }

    /// Participant `p`'s buffer of a run whose buffers start at HBM offset
    /// `base`.
    fn hbm_at(&self, p: usize, job: &Job, base: u64) -> Location {
        let (sip, cube, pe) = self.group.coords(p);
        Location {
            space: Space::Hbm,
            sip,
            cube,
            pe: 0,
            offset: base + u64::from(pe) * Self::pe_stride(job),
        }
    }

    /// Writes every participant's input (and zeroes the rest of its buffer).
    fn write_inputs(&self, machine: &mut Machine, job: &Job) -> Result<(), CclError> {
        for p in 0..self.group.size() {
            let data = verify::input(job, self.group.size(), p);
            machine.write(self.hbm_at(p, job, 0), &data).map_err(|e| {
                CclError::Config(format!("writing the input of participant {p}: {e}"))
            })?;
        }
        Ok(())
    }

    fn outputs_match(&self, machine: &Machine, job: &Job) -> bool {
        self.first_mismatch(machine, job).is_none()
    }

    /// After a functional run of `job`: the first participant's first
    /// element that differs from the reference, None when every output is
    /// right. Its Display names participant, element, expected and got.
    pub fn first_mismatch(&self, machine: &Machine, job: &Job) -> Option<verify::Mismatch> {
        self.first_mismatch_at(machine, job, 0)
    }

    /// As [`Communicator::first_mismatch`], for results at HBM offset `base`.
    pub fn first_mismatch_at(
        &self,
        machine: &Machine,
        job: &Job,
        base: u64,
    ) -> Option<verify::Mismatch> {
        let n = self.group.size();
        (0..n).find_map(|p| {
            let got = machine
                .read(self.hbm_at(p, job, base), job.elems)
                .expect("buffer written");
            verify::first_mismatch(job, n, p, &got)
        })
    }
}

/// Inputs and the independent reference.
pub mod verify {
    use super::*;
    use kernels::split;

    /// Most participants whose sums [`output_matches`] checks exactly: the
    /// inputs are at most 3, and f16 holds every integer up to 2048.
    pub const MAX_PARTICIPANTS: usize = 2048 / 3;

    /// Participant `p`'s value at element `i`: 0 to 3 from a hash of (p, i).
    /// Any two participants differ at about three elements in four, so a
    /// result that counts one participant twice and drops another fails; a
    /// pattern periodic in p (as an earlier `(7p + 3i) mod 5` was) would not.
    pub fn value(p: usize, i: usize) -> f32 {
        let mut x = ((p as u64) << 32 ^ i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((x ^ (x >> 31)) & 3) as f32
    }

    /// Participant `p`'s buffer before the collective.
    pub fn input(job: &Job, n: usize, p: usize) -> Vec<f16> {
        let blocks = split(job.elems, n);
        (0..job.elems)
            .map(|i| {
                let owned = match job.collective {
                    Collective::AllGather => blocks[p].0 <= i && i < blocks[p].0 + blocks[p].1,
                    Collective::Broadcast => p == 0,
                    _ => true,
                };
                f16::from_f32(if owned { value(p, i) } else { 0.0 })
            })
            .collect()
    }

    /// The reduction of element `i` over all participants.
    fn reduced(job: &Job, n: usize, i: usize) -> f32 {
        (1..n).fold(value(0, i), |acc, p| job.op.apply(acc, value(p, i)))
    }

    /// Whether participant `p`'s buffer after the collective is right.
    pub fn output_matches(job: &Job, n: usize, p: usize, got: &[f16]) -> bool {
        first_mismatch(job, n, p, got).is_none()
    }

    /// The first element of participant `p`'s buffer that is wrong.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Mismatch {
        pub participant: usize,
        pub element: usize,
        /// NaN when there is no reference: an all-to-all buffer that is
        /// not `n` equal blocks (refused before a run).
        pub expected: f16,
        pub got: f16,
    }

    impl fmt::Display for Mismatch {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "participant {}, element {}: expected {}, got {}",
                self.participant, self.element, self.expected, self.got
            )
        }
    }

    /// The first element of `p`'s buffer after the collective that differs
    /// from the reference (elements the collective leaves undefined, such
    /// as blocks a reduce-scatter does not own, are not checked).
    pub fn first_mismatch(job: &Job, n: usize, p: usize, got: &[f16]) -> Option<Mismatch> {
        let wrong = |element: usize, expected: f16| Mismatch {
            participant: p,
            element,
            expected,
            got: got.get(element).copied().unwrap_or(f16::NAN),
        };
        if !shape_checks(job, n, got) {
            return Some(wrong(0, f16::NAN));
        }
        let blocks = split(job.elems, n);
        (0..job.elems).find_map(|i| {
            let expect = expected(job, n, p, &blocks, i)?;
            (got.get(i) != Some(&expect)).then(|| wrong(i, expect))
        })
    }

    /// How many elements of `p`'s buffer differ from the reference (every
    /// element when an all-to-all buffer has no reference).
    pub fn count_wrong(job: &Job, n: usize, p: usize, got: &[f16]) -> u64 {
        if !shape_checks(job, n, got) {
            return job.elems as u64;
        }
        let blocks = split(job.elems, n);
        (0..job.elems)
            .filter(|&i| expected(job, n, p, &blocks, i).is_some_and(|e| got.get(i) != Some(&e)))
            .count() as u64
    }

    /// Whether the buffer has a reference: an all-to-all needs `n` equal
    /// blocks.
    fn shape_checks(job: &Job, n: usize, got: &[f16]) -> bool {
        job.collective != Collective::AllToAll
            || (n > 0 && job.elems.is_multiple_of(n) && got.len() == job.elems)
    }

    /// Element `i` of participant `p`'s result; None where the collective
    /// leaves it undefined.
    fn expected(job: &Job, n: usize, p: usize, blocks: &[(usize, usize)], i: usize) -> Option<f16> {
        let owner = |i: usize| {
            blocks
                .iter()
                .position(|b| b.0 <= i && i < b.0 + b.1)
                .unwrap_or(0)
        };
        let expect = match job.collective {
            Collective::AllReduce => reduced(job, n, i),
            Collective::ReduceScatter if owner(i) == p => reduced(job, n, i),
            Collective::ReduceScatter => return None,
            Collective::AllGather => value(owner(i), i),
            Collective::Broadcast => value(0, i),
            Collective::Reduce if p == 0 => reduced(job, n, i),
            Collective::Reduce => return None,
            // p's block j must be j's input block p.
            Collective::AllToAll => {
                let b = job.elems / n;
                value(i / b, p * b + i % b)
            }
        };
        Some(f16::from_f32(expect))
    }
}

#[cfg(test)]
mod tests {
    use super::verify::*;
    use super::*;

    /// Counting one participant twice and dropping another changes the
    /// all-reduce of a 64-element buffer, for every pair of participants.
    #[test]
    fn no_participant_can_stand_in_for_another() {
        for n in [6usize, 16, 64] {
            let job = Job {
                collective: Collective::AllReduce,
                op: ReduceOp::Sum,
                elems: 64,
            };
            let sum = |skip: usize, twice: usize| -> Vec<f16> {
                (0..64)
                    .map(|i| {
                        let s: f32 = (0..n)
                            .map(|p| if p == skip { twice } else { p })
                            .map(|p| value(p, i))
                            .sum();
                        f16::from_f32(s)
                    })
                    .collect()
            };
            let right = sum(usize::MAX, 0);
            assert!(output_matches(&job, n, 0, &right));
            for a in 0..n {
                for b in (0..n).filter(|&b| b != a) {
                    assert!(
                        !output_matches(&job, n, 0, &sum(b, a)),
                        "{n} participants: {a} counted twice, {b} dropped, and it passed"
                    );
                }
            }
        }
        // Inputs stay within 0..=3, so MAX_PARTICIPANTS sums are exact.
        assert!((0..1000).all(|k| (0.0..=3.0).contains(&value(k % 97, k))));
        assert_eq!(MAX_PARTICIPANTS, 682);
    }

    /// A wrong output is reported at its first wrong element, with the
    /// reference and the value found; elements a reduce-scatter leaves
    /// undefined are never reported.
    #[test]
    fn the_first_wrong_element_is_named() {
        let n = 4;
        let job = |collective| Job {
            collective,
            op: ReduceOp::Max,
            elems: 40,
        };
        let reference = |job: &Job, p: usize| -> Vec<f16> {
            let blocks = kernels::split(job.elems, n);
            (0..job.elems)
                .map(|i| {
                    let all = (1..n).fold(value(0, i), |a, q| job.op.apply(a, value(q, i)));
                    let owner = blocks.iter().position(|b| b.0 <= i && i < b.0 + b.1);
                    let x = match job.collective {
                        Collective::ReduceScatter if owner != Some(p) => 7.0,
                        _ => all,
                    };
                    f16::from_f32(x)
                })
                .collect()
        };
        let ar = job(Collective::AllReduce);
        let mut got = reference(&ar, 2);
        assert_eq!(first_mismatch(&ar, n, 2, &got), None);
        got[23] = f16::from_f32(9.0);
        got[31] = f16::from_f32(9.0);
        let m = first_mismatch(&ar, n, 2, &got).expect("element 23 is wrong");
        let want = (1..n).fold(value(0, 23), |a, q| a.max(value(q, 23)));
        assert_eq!((m.participant, m.element), (2, 23));
        assert_eq!(
            m.to_string(),
            format!("participant 2, element 23: expected {want}, got 9")
        );
        // Reduce-scatter: participant 1 owns elements 10..20 only.
        let rs = job(Collective::ReduceScatter);
        let mut got = reference(&rs, 1);
        assert_eq!(first_mismatch(&rs, n, 1, &got), None);
        got[12] = f16::from_f32(9.0);
        assert_eq!(first_mismatch(&rs, n, 1, &got).map(|m| m.element), Some(12));
    }

    /// All-to-all: the right exchange passes; any participant whose two
    /// received blocks are swapped fails, for every pair of blocks. (Two
    /// blocks of b elements agree by chance with probability 4^-b: at 8
    /// elements one of the 1,920 swaps below does.)
    #[test]
    fn a_swapped_pair_of_all_to_all_blocks_fails() {
        for n in [2usize, 5, 16] {
            let b = 32;
            let job = Job {
                collective: Collective::AllToAll,
                op: ReduceOp::Sum,
                elems: n * b,
            };
            // p's block j is j's input block p.
            let out = |p: usize, order: &dyn Fn(usize) -> usize| -> Vec<f16> {
                (0..n * b)
                    .map(|i| f16::from_f32(value(order(i / b), p * b + i % b)))
                    .collect()
            };
            for p in 0..n {
                assert!(output_matches(&job, n, p, &out(p, &|j| j)));
                assert!(!output_matches(&job, n, p, &input(&job, n, p)) || n == 1);
                for x in 0..n {
                    for y in (x + 1)..n {
                        let swap = |j: usize| match j {
                            j if j == x => y,
                            j if j == y => x,
                            j => j,
                        };
                        assert!(
                            !output_matches(&job, n, p, &out(p, &swap)),
                            "{n} participants: p{p} with blocks {x} and {y} swapped passed"
                        );
                    }
                }
            }
        }
        // A buffer that is not n equal blocks never matches.
        let job = Job {
            collective: Collective::AllToAll,
            op: ReduceOp::Sum,
            elems: 7,
        };
        assert!(!output_matches(&job, 2, 0, &input(&job, 2, 0)));
    }
}
