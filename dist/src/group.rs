//! The process group, as in torch.distributed: one machine, one rank per SIP,
//! the default communicator over every rank and subgroups over some of them,
//! each with its own queue scope and its own epoch barrier.

use super::DistError;
use super::barrier::EpochBarrier;
use super::layout;
use kernbench_ccl::estimate::{Budget, Estimate};
use kernbench_ccl::{
    AUTO, AlgoConfig, CclConfig, CclError, Collective, Communicator, Group, Job, Operand,
};
use kernbench_runtime::machine::{InstallError, Machine, Tables};
use kernbench_spec::spec::System;
use kernbench_systems::Tick;
use kernbench_systems::ipcq::Scope;
use kernbench_systems::memory::DataMode;
use std::collections::BTreeSet;

/// A group of ranks: its participants, communicators and barrier.
pub struct RankGroup {
    pub name: String,
    /// Ranks in member order (rank r runs on SIP r).
    pub ranks: Vec<u32>,
    /// The participants its collectives run on.
    pub members: Group,
    /// Its installed communicators: the entry's, or under `algorithm: auto`
    /// the configurations the tuner has picked for it that are still
    /// installed, least recently used first (see `ProcessGroup::comm_for`).
    /// Empty once [`ProcessGroup::release`]d.
    pub comms: Vec<Communicator>,
    /// Auto communicators released to make room for a new pick, ever.
    pub releases: usize,
    pub(super) barrier: EpochBarrier,
}

/// What picks the configuration of each collective of a group whose ccl
/// entry is `algorithm: auto`: the autotuner implements it, and whoever
/// builds the group passes it in (dist stays below autotune).
pub trait ConfigPicker: Send {
    /// The configuration a `collective` of `bytes` on `group` runs.
    fn pick(
        &mut self,
        group: &Group,
        collective: Collective,
        bytes: u64,
    ) -> Result<&AlgoConfig, CclError>;
    /// The picker as `Any`, so its builder can read it back as its own type.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A group's handle; [`WORLD`] is every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupId(pub(super) usize);

/// The default group: every rank.
pub const WORLD: GroupId = GroupId(0);

/// In which order runnable workers take turns. Results never depend on it
/// (submissions reach the engine in an order fixed by their times, ranks
/// and each rank's own order); tests flip it to show so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TurnOrder {
    #[default]
    Ascending,
    Descending,
}

/// A machine shared by `world_size` ranks.
pub struct ProcessGroup {
    pub machine: Machine,
    /// The ccl.yaml entry whose algorithm every collective runs, or whose
    /// algorithm is `auto`: then [`ProcessGroup::tuner`] picks per call.
    pub config: AlgoConfig,
    /// Under `algorithm: auto`, what picks each collective's configuration
    /// by its size bucket and group (decisions made once per bucket and
    /// group; give it a cache with `Tuner::with_cache` to reuse them
    /// across runs).
    pub tuner: Option<Box<dyn ConfigPicker>>,
    pub world_size: u32,
    /// Whether a rank is a SIP or, in the legacy mode, a PE.
    pub unit: RankUnit,
    pub(super) groups: Vec<RankGroup>,
    /// Tick at which the default communicator's wiring had landed.
    pub init_tick: Tick,
    pub turn_order: TurnOrder,
    /// Point-to-point links, unmatched messages and joining group transfers.
    pub(super) p2p: super::p2p::P2p,
}

/// What a rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankUnit {
    /// One rank per SIP: a SIP is the unit a host process drives.
    Sip,
    /// The legacy mode, kept for PE-level collectives: one rank per PE,
    /// rank = flat PE index.
    Pe,
}

/// Resolves the world size (the number of ranks): the entry's `world_size`,
/// else the defaults' (an entry inherits it), else one rank per SIP. A world
/// size equal to the number of PEs selects the legacy rank = flat PE mode.
pub fn world_size(sys: &System, config: &AlgoConfig) -> Result<(u32, RankUnit), DistError> {
    let sips = sys.spec.system.sips.count;
    let pes = u64::from(sips) * u64::from(sys.cubes_per_sip()) * u64::from(sys.pes_per_cube());
    let n = config.world_size.unwrap_or(sips);
    if n <= sips {
        return Ok((n, RankUnit::Sip));
    }
    if u64::from(n) == pes {
        return Ok((n, RankUnit::Pe));
    }
    Err(DistError::Config(format!(
        "world_size {n} (ccl entry '{}') fits neither {} (system.sips.count = {sips}, one rank per SIP) nor its {pes} PEs (the legacy rank = flat PE mode); allowed: 1 to {sips}, or exactly {pes}",
        config.name, sys.origin
    )))
}

/// Builds the machine of `sys` and installs the default communicator of
/// ccl entry `algorithm` over every rank, through the engine: the host sends
/// each PE its neighbour table over PCIe and the SIP network, so this takes
/// simulated time and the first collective starts after
/// [`ProcessGroup::init_tick`].
pub fn init_process_group(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    mode: DataMode,
) -> Result<ProcessGroup, DistError> {
    init_process_group_within(sys, ccl, algorithm, mode, &Budget::of_this_machine())
}

/// Memory each process-group worker reserves: its thread's stack.
const BYTES_PER_WORKER: f64 = super::WORKER_STACK as f64;
/// Wall time to start, schedule and join one worker.
const SECONDS_PER_WORKER: f64 = 50e-6;

/// Initialising a process group of `world` ranks on `sys`: the build, and
/// a worker thread (its stack reserved) per rank (docs/model.md §Cost
/// estimate).
pub fn process_group_estimate(sys: &System, world: u32) -> Estimate {
    let mut e = Estimate::build(sys);
    e.peak_bytes += f64::from(world) * BYTES_PER_WORKER;
    e.seconds += f64::from(world) * SECONDS_PER_WORKER;
    e
}

/// What shrinks a process group: its system and its ranks.
const PROCESS_GROUP_KNOBS: &str =
    "fewer SIPs (system.sips.count) or ranks (world_size), fewer cubes (sip.cube_mesh) or PEs";

/// [`init_process_group`] refused before anything is built when building
/// the machine and starting a worker per rank are estimated to need more
/// memory or time than `budget` (docs/model.md §Cost estimate).
pub fn init_process_group_within(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    mode: DataMode,
    budget: &Budget,
) -> Result<ProcessGroup, DistError> {
    init_process_group_picking(sys, ccl, algorithm, mode, budget, None)
}

/// [`init_process_group_within`] for any entry: under `algorithm: auto`,
/// `new_picker` builds what picks each collective's configuration (the
/// autotuner: `autotune::init_process_group` passes it); without one an
/// `auto` entry is refused.
pub fn init_process_group_picking(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    mode: DataMode,
    budget: &Budget,
    new_picker: Option<&dyn Fn() -> Box<dyn ConfigPicker>>,
) -> Result<ProcessGroup, DistError> {
    let config = ccl
        .entry(algorithm)
        .map_err(|(p, a)| DistError::Config(format!("{p}; allowed: {a}")))?
        .clone();
    let (n, unit) = world_size(sys, &config)?;
    process_group_estimate(sys, n)
        .check(budget, PROCESS_GROUP_KNOBS)
        .map_err(|e| DistError::Config(format!("process group on {}: {e}", sys.origin)))?;
    layout::mapper(&config.mapper).map_err(DistError::Config)?;
    let machine = Machine::build_with(sys, mode).map_err(|e| DistError::Config(e.to_string()))?;
    let tuner = if config.algorithm == AUTO {
        let new_picker = new_picker.ok_or_else(|| {
            DistError::Config(format!(
                "ccl entry '{algorithm}' has algorithm auto, which needs the autotuner to pick each collective's configuration; build the group with the autotune module's init_process_group, or name an entry with a fixed algorithm"
            ))
        })?;
        Some(new_picker())
    } else {
        None
    };
    let mut pg = ProcessGroup {
        machine,
        config,
        tuner,
        world_size: n,
        unit,
        groups: Vec::new(),
        init_tick: 0,
        turn_order: TurnOrder::default(),
        p2p: Default::default(),
    };
    let ranks: Vec<u32> = (0..n).collect();
    let group = match unit {
        RankUnit::Sip => pg.sip_group("world", &ranks)?,
        // Every PE of every SIP: the all_pes group over the machine.
        RankUnit::Pe => Group::new(sys).every_pe(),
    };
    pg.add_group("world", ranks, group)?;
    pg.init_tick = pg.machine.engine.now();
    Ok(pg)
}

impl ProcessGroup {
    /// A subgroup of `ranks`, any distinct ranks of the world in any order
    /// (torch's `new_group(ranks)`: the list's order is the group's rank
    /// order, so `[3, 1]` runs rank 3 as its first member): installs its own
    /// communicator, whose queues never mix with another group's.
    pub fn new_group(&mut self, ranks: &[u32]) -> Result<GroupId, DistError> {
        if self.unit == RankUnit::Pe {
            return Err(DistError::Config(
                "new_group in the rank = flat PE mode: its ranks are PEs, and groups are made of SIPs; allowed: collectives over the world, or a world_size of at most the SIP count".into(),
            ));
        }
        if let Some(&r) = ranks.iter().find(|&&r| r >= self.world_size) {
            return Err(DistError::Config(format!(
                "new_group({ranks:?}): rank {r} is not in the world of {n} ranks; allowed: ranks 0..{n}, each once",
                n = self.world_size
            )));
        }
        let name = format!("group{}{ranks:?}", self.groups.len());
        let group = self.sip_group(&name, ranks)?;
        self.add_group(&name, ranks.to_vec(), group)
    }

    /// The participants of ranks = SIPs `ranks`, as the mapper says.
    fn sip_group(&self, name: &str, ranks: &[u32]) -> Result<Group, DistError> {
        let group = Group::of_sips(&self.machine.system, ranks)
            .map_err(|e| DistError::Config(format!("group {name}: {e}")))?;
        Ok(if self.config.mapper == "all_pes" {
            group.every_pe()
        } else {
            group
        })
    }

    /// Installs `group`'s communicator (none yet under `auto`: each pick
    /// installs its own) and opens its barrier.
    fn add_group(
        &mut self,
        name: &str,
        ranks: Vec<u32>,
        group: Group,
    ) -> Result<GroupId, DistError> {
        let comms = if self.tuner.is_some() {
            Vec::new()
        } else {
            vec![Communicator::with_group(
                &mut self.machine,
                &self.config,
                group.clone(),
                name,
            )?]
        };
        Ok(self.push_group(name, ranks, group, comms))
    }

    /// Opens the barrier of a group whose communicators are installed.
    fn push_group(
        &mut self,
        name: &str,
        ranks: Vec<u32>,
        members: Group,
        comms: Vec<Communicator>,
    ) -> GroupId {
        self.groups.push(RankGroup {
            name: name.into(),
            ranks: ranks.clone(),
            members,
            comms,
            releases: 0,
            barrier: EpochBarrier::new(ranks),
        });
        GroupId(self.groups.len() - 1)
    }

    /// The communicator a collective `job` on `operand` of group `g` rooted
    /// at its member `root` (its place in the group's ranks; 0 for a
    /// collective without a root) runs on: the group's own, or under `auto`
    /// the tuner's pick for the job's size bucket (for one lane, when
    /// lane-wise), over the group turned to start at the root. A lane-wise
    /// operand runs on a lane-wise communicator of the same configuration
    /// over the group's participants (every PE of each cube when a lane
    /// sits past them), installed at its first use like a new root's.
    /// A turn whose queues an installed communicator of that configuration
    /// already has runs on them: the shape-keeping turn
    /// ([`Group::rooted_at`]: lanes on a shifted torus) or the ring along the
    /// grid's cycle ([`Group::ring_from`]: `ring` on any grid). Otherwise the
    /// shape-keeping turn's communicator is prepared here (its slot areas
    /// placed, no simulated time) and its neighbour tables returned: they
    /// land when the collective is handed to the engine.
    ///
    /// Under `auto` a group's communicators stay installed while they fit,
    /// most recently used last in [`RankGroup::comms`]: a new one whose slot
    /// areas do not fit releases the group's least recently used ones that
    /// no work in flight uses (`busy`: an asynchronous collective may still
    /// run on one), one at a time, until it does; a pick released and chosen again is
    /// installed again and pays its install time again. A fixed group keeps
    /// its own communicator first and adds one per other root it serves.
    pub(super) fn comm_for(
        &mut self,
        g: GroupId,
        root: u32,
        job: &Job,
        operand: &Operand,
        busy: &BTreeSet<Scope>,
    ) -> Result<(Communicator, Option<Tables>), DistError> {
        let rg = &self.groups[g.0];
        let auto = self.tuner.is_some();
        let (members, lanes) = arrangement(&rg.members, operand);
        if root == 0 && !auto && !lanes {
            let comm = rg.comms.first().ok_or_else(|| released(rg))?;
            return Ok((comm.clone(), None));
        }
        let turns = [members.rooted_at(root), members.ring_from(root)];
        // Lane-wise, the tuner picks what serves one lane best.
        let tuned = if lanes {
            turns[0].lane_of(0, 0)
        } else {
            turns[0].clone()
        };
        let config = match &mut self.tuner {
            Some(tuner) => tuner.pick(&tuned, job.collective, job.bytes())?,
            None => &rg.comms.first().ok_or_else(|| released(rg))?.config,
        }
        .clone();
        let of_config = |c: &Communicator| c.config.name == config.name && c.lanes == lanes;
        let exact = rg
            .comms
            .iter()
            .position(|c| of_config(c) && turns.contains(&c.group))
            .map(|i| (i, None));
        let view = || {
            turns.iter().find_map(|t| {
                let i = rg
                    .comms
                    .iter()
                    .position(|c| of_config(c) && same_queues(c, t))?;
                Some((i, Some(t.clone())))
            })
        };
        if let Some((i, turn)) = exact.or_else(view) {
            let comms = &mut self.groups[g.0].comms;
            let i = if auto {
                let used = comms.remove(i);
                comms.push(used);
                comms.len() - 1
            } else {
                i
            };
            let comm = comms[i].clone();
            let comm = match turn {
                Some(group) => Communicator { group, ..comm },
                None => comm,
            };
            return Ok((comm, None));
        }
        let mut name = rg.name.clone();
        if auto {
            name += &format!("/auto:{}", config.name);
        }
        if root > 0 {
            name += &format!("/root:{}", rg.ranks[root as usize]);
        }
        if lanes {
            name += "/lanes";
        }
        let [members, _] = turns;
        self.install_fitting(g, &config, (members, lanes), &name, busy)
    }

    /// Prepares a communicator of `config` over `members` (lane-wise when
    /// `lanes`) for group `g`; under `auto`, releases the group's least
    /// recently used ones not `busy` while its slot areas do not fit.
    fn install_fitting(
        &mut self,
        g: GroupId,
        config: &AlgoConfig,
        (members, lanes): (Group, bool),
        name: &str,
        busy: &BTreeSet<Scope>,
    ) -> Result<(Communicator, Option<Tables>), DistError> {
        loop {
            let rg = &mut self.groups[g.0];
            let m = &mut self.machine;
            let prepared = if lanes {
                Communicator::prepare_lanes(m, config, members.clone(), name)
            } else {
                Communicator::prepare(m, config, members.clone(), name, None)
            };
            match prepared {
                Ok((comm, tables)) => {
                    rg.comms.push(comm.clone());
                    return Ok((comm, Some(tables)));
                }
                Err(CclError::Install(InstallError::Memory(e))) => {
                    if !self.release_least_used_pick(Some(g), busy)? {
                        return Err(self.memory_held(g, e, busy));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A communicator that does not fit: the install's error, and which of
    /// the group's communicators work in flight holds installed.
    fn memory_held(&self, g: GroupId, e: String, busy: &BTreeSet<Scope>) -> DistError {
        let rg = &self.groups[g.0];
        let held: Vec<&str> = rg
            .comms
            .iter()
            .filter(|c| busy.contains(&c.scope))
            .map(|c| c.config.name.as_str())
            .collect();
        if self.tuner.is_none() || held.is_empty() {
            return CclError::Install(InstallError::Memory(e)).into();
        }
        DistError::Run(format!(
            "{e}; communicator(s) {} of group '{}' run work in flight and stay installed until it ends: wait for that work (Rank::wait) before this collective",
            held.join(", "),
            rg.name
        ))
    }

    /// Under `auto`, releases the least recently used communicator of group
    /// `only` (or of the group that holds the most) that no work in flight
    /// uses (`busy` scopes), to make room for another installation; false
    /// when there is none (or the groups are not `auto`).
    pub(super) fn release_least_used_pick(
        &mut self,
        only: Option<GroupId>,
        busy: &BTreeSet<Scope>,
    ) -> Result<bool, DistError> {
        if self.tuner.is_none() {
            return Ok(false);
        }
        let idle = |rg: &RankGroup| rg.comms.iter().position(|c| !busy.contains(&c.scope));
        let Some((rg, i)) = self
            .groups
            .iter_mut()
            .enumerate()
            .filter(|(k, _)| only.is_none_or(|g| g.0 == *k))
            .filter_map(|(_, rg)| Some((idle(rg)?, rg)))
            .max_by_key(|(_, rg)| rg.comms.len())
            .map(|(i, rg)| (rg, i))
        else {
            return Ok(false);
        };
        let lru = rg.comms.remove(i);
        rg.releases += 1;
        self.machine
            .release_scope(lru.scope)
            .map_err(CclError::from)?;
        Ok(true)
    }

    /// Releases group `g`'s communicators: their slot areas are freed and
    /// their neighbour tables leave the PEs (see [`Machine::release_scope`]).
    /// A later collective of a fixed group is refused; under `auto` the
    /// next pick installs itself again. Call it between collectives.
    pub fn release(&mut self, g: GroupId) -> Result<(), DistError> {
        let count = self.groups.len();
        let rg = self.groups.get_mut(g.0).ok_or_else(|| {
            DistError::Config(format!(
                "release: group {} is not one of this process group's {count} groups; allowed: WORLD or a GroupId new_group returned",
                g.0
            ))
        })?;
        for comm in std::mem::take(&mut rg.comms) {
            self.machine
                .release_scope(comm.scope)
                .map_err(CclError::from)?;
        }
        Ok(())
    }

    /// A group of every rank whose communicator runs `config` (instead of
    /// the process group's), each SIP's receive queues shaped by
    /// `queues(sip)`: how a heterogeneous group runs one algorithm while a
    /// rank lacking the config keeps its own queue settings.
    pub fn world_group_with(
        &mut self,
        name: &str,
        config: &AlgoConfig,
        queues: &dyn Fn(u32) -> kernbench_runtime::kernel::wiring::QueueConfig,
    ) -> Result<GroupId, DistError> {
        let ranks: Vec<u32> = (0..self.world_size).collect();
        let group = self.sip_group(name, &ranks)?;
        let comm = Communicator::with_queues(
            &mut self.machine,
            config,
            group.clone(),
            name,
            Some(queues),
        )?;
        Ok(self.push_group(name, ranks, group, vec![comm]))
    }

    /// A group's ranks and communicator.
    pub fn group(&self, g: GroupId) -> &RankGroup {
        &self.groups[g.0]
    }

    /// Forgets every half-joined collective and unmatched message (after a
    /// failed spawn).
    pub(super) fn reset_barriers(&mut self) {
        self.p2p.reset();
        for g in &mut self.groups {
            g.barrier.reset();
        }
    }
}

/// The participants a collective on `operand` of a group of `members`
/// runs on, and whether lane by lane: a lane-wise operand runs on the
/// group's lanes, over every PE of each cube when a lane sits past the
/// members' PEs; with one participant per SIP, the lane at (0, 0) is the
/// group itself.
fn arrangement(members: &Group, operand: &Operand) -> (Group, bool) {
    let one_per_sip = members.cubes_per_sip() * members.pes == 1;
    let lanes = (operand.lanes.as_deref())
        .filter(|l| !one_per_sip || l.iter().any(|lane| (lane.cube, lane.pe) != (0, 0)));
    match lanes {
        Some(l) if l.iter().any(|lane| lane.pe >= members.pes) => {
            (members.clone().every_pe(), true)
        }
        Some(_) => (members.clone(), true),
        None => (members.clone(), false),
    }
}

/// Whether `comm`'s algorithm accepts `group` and wires on it the queues
/// `comm` has (every PE the same peers in the same directions; lane by lane
/// for a lane-wise one): then `group`, the same participants numbered from
/// another root, runs on them as they are.
fn same_queues(comm: &Communicator, group: &Group) -> bool {
    let turned = Communicator {
        group: group.clone(),
        ..comm.clone()
    };
    if turned.check_arrangement().is_err() {
        return false;
    }
    let q = comm.config.queues();
    let wired = |c: &Communicator| {
        let mut tables = c.wiring(&c.group, &q);
        tables.iter_mut().for_each(|(_, entries)| entries.sort());
        tables.sort();
        tables
    };
    wired(comm) == wired(&turned)
}

/// A fixed group whose communicator was released: what to do instead.
fn released(rg: &RankGroup) -> DistError {
    DistError::Config(format!(
        "group '{}' has no communicator: it was released (ProcessGroup::release); allowed: collectives on groups not released, or a new group over ranks {:?}",
        rg.name, rg.ranks
    ))
}
