//! [`Communicator`]: an algorithm's wiring installed on a group of a
//! machine in a queue scope of its own; it checks a job before anything is
//! simulated, traces and submits the kernel, runs a collective in place
//! (writing inputs and checking outputs in functional mode) and measures it
//! as a [`CollResult`].

use crate::algorithm::{Algorithm, Buffers, KernelArgs, Operand};
use crate::collective::{Collective, Job, ReduceOp};
use crate::config::{AlgoConfig, PieceLimits};
use crate::error::CclError;
use crate::group::Group;
use crate::{algorithms, bound, verify};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::machine::{LaunchHandle, Machine, Tables};
use kernbench_spec::spec::System;
use kernbench_spec::topology::address::{Location, Space};
use kernbench_systems::ipcq::Scope;
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::Launch;
use kernbench_systems::{PeIdx, Tick};
use serde::{Deserialize, Serialize};

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
    /// Lane-wise: each lane of `group` ([`Group::lanes`]: one (cube, pe)
    /// of every SIP) is a collective of its own, all wired in this one
    /// scope (their PEs are disjoint) and run together on the SIP links.
    pub lanes: bool,
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
        Self::prepare_as(machine, config, (group, false), name, queues)
    }

    /// As [`Communicator::prepare`], lane-wise: every lane of `group` wired
    /// as a one-participant-per-SIP group in one scope (see
    /// [`Communicator::lanes`]).
    pub fn prepare_lanes(
        machine: &mut Machine,
        config: &AlgoConfig,
        group: Group,
        name: &str,
    ) -> Result<(Self, Tables), CclError> {
        Self::prepare_as(machine, config, (group, true), name, None)
    }

    fn prepare_as(
        machine: &mut Machine,
        config: &AlgoConfig,
        (group, lanes): (Group, bool),
        name: &str,
        queues: Option<&dyn Fn(u32) -> QueueConfig>,
    ) -> Result<(Self, Tables), CclError> {
        let algorithm = algorithms::find(&config.algorithm)?;
        if group.pes > 1 && !lanes && !algorithm.every_pe() {
            return Err(CclError::Unsupported {
                algorithm: config.algorithm.clone(),
                what: "every PE of a cube as a participant (mapper all_pes)".into(),
                supported: "cube leaders only (mapper leader_only); ring and tree run on every PE"
                    .into(),
            });
        }
        // The machine's network; how the group lies on it is check_group's.
        let topo = machine.system.spec.system.sips.topology;
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
        let comm = Self {
            group,
            config: config.clone(),
            algorithm,
            scope: Scope::DEFAULT,
            lanes,
        };
        comm.check_arrangement()?;
        let q = config.queues();
        let mut tables = comm.wiring(&comm.group, &q);
        if let Some(queues) = queues {
            // A queue's slots, credits and chunk size are its receiver's own.
            let per_sip = (comm.group.machine_cubes() * comm.group.pes_per_cube).max(1);
            for (pe, entries) in &mut tables {
                let own = queues(pe.0 / per_sip);
                for e in entries.iter_mut() {
                    (e.buffer, e.n_slots, e.slot_size) = (own.buffer, own.n_slots, own.slot_size);
                }
            }
        }
        let scope = machine.open_scope(name);
        let tables = machine.place_scope(scope, tables)?;
        Ok((Self { scope, ..comm }, tables))
    }

    /// The groups one kernel runs on: every lane of `group` when lane-wise,
    /// else `group` itself.
    pub fn arrangements(&self, group: &Group) -> Vec<Group> {
        if self.lanes {
            group.lanes()
        } else {
            vec![group.clone()]
        }
    }

    /// One kernel's group: the first lane when lane-wise (every lane has
    /// its shape), else the communicator's group.
    fn first_arrangement(&self) -> Group {
        if self.lanes {
            self.group.lane_of(0, 0)
        } else {
            self.group.clone()
        }
    }

    /// The neighbour tables of this communicator's algorithm on `group`
    /// (the union of its lanes' when lane-wise).
    pub fn wiring(&self, group: &Group, q: &QueueConfig) -> Tables {
        self.arrangements(group)
            .iter()
            .flat_map(|g| self.algorithm.wiring(g, q))
            .collect()
    }

    /// Whether the algorithm serves the group (each lane, when lane-wise:
    /// they all have the same shape, so the first answers for all).
    pub fn check_arrangement(&self) -> Result<(), CclError> {
        self.algorithm
            .check_group(&self.first_arrangement())
            .map_err(|e| {
                let lane = if self.lanes {
                    "each lane (one PE of every SIP, run lane by lane): "
                } else {
                    ""
                };
                CclError::Config(format!(
                    "{} ({}): {lane}{e}",
                    self.config.name, self.config.algorithm
                ))
            })
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
        let tightest = self
            .group
            .simulated()
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
        let pes: Vec<PeIdx> = self.group.simulated().map(|p| self.group.pe(p)).collect();
        let args = KernelArgs {
            group: self.group.clone(),
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
    pub(crate) fn pe_stride(job: &Job) -> u64 {
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
        Ok(machine.submit_programs(programs, self.scope, at)?)
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

    /// The programs of `job` on `operand`: on its lanes, each lane's kernel
    /// on its own buffer, when lane-wise; else [`Communicator::trace_job`]
    /// on its buffers.
    pub fn trace_operand(
        &self,
        machine: &Machine,
        job: Job,
        operand: &Operand,
    ) -> Result<Vec<(PeIdx, Launch)>, CclError> {
        let (Some(lanes), true) = (&operand.lanes, self.lanes) else {
            return self.trace_job(machine, job, operand.buffers);
        };
        Self::check_before_build(&machine.system, &self.config, &job)?;
        let mut programs = Vec::new();
        for l in lanes {
            let lane = Self {
                group: self.group.lane_of(l.cube, l.pe),
                lanes: false,
                ..self.clone()
            };
            let buffers = Buffers {
                base: l.base,
                pe_stride: 0,
                ..operand.buffers
            };
            programs.extend(lane.trace_job(machine, job, buffers)?);
        }
        Ok(programs)
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
    pub(crate) fn prepare_run(&self, machine: &mut Machine, job: &Job) -> Result<bool, CclError> {
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

    /// The measures of a run of `job` that took `ticks`. Lane-wise, the
    /// bound and bus factor are one lane's (each lane is a collective over
    /// the SIPs; the lanes share the SIP links, so the run takes at least
    /// that) and `participants` counts every lane's.
    pub fn result(
        &self,
        machine: &Machine,
        job: Job,
        ticks: Tick,
        verified: Option<bool>,
    ) -> CollResult {
        let sys = &machine.system;
        let measured = self.first_arrangement();
        let bound = bound::lower_bound(machine, sys, &measured, &job);
        let bound_ticks = bound.ticks;
        let time_ns = ticks as f64 * sys.spec.system.tick_ns;
        let n = measured.size();
        let algbw = if time_ns > 0.0 {
            job.bytes() as f64 / time_ns
        } else {
            0.0
        };
        CollResult {
            collective: job.collective,
            algorithm: self.config.name.clone(),
            op: job.op,
            participants: self.group.size(),
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

    /// [`Communicator::result`] of a run on `operand`: lane-wise, its
    /// participants are the lanes run times the group's SIPs.
    pub fn operand_result(
        &self,
        machine: &Machine,
        job: Job,
        operand: &Operand,
        ticks: Tick,
    ) -> CollResult {
        let mut res = self.result(machine, job, ticks, None);
        if let (Some(lanes), true) = (&operand.lanes, self.lanes) {
            res.participants = lanes.len() * self.group.sips.len();
        }
        res
    }

    /// Participant `p`'s buffer of a run whose buffers start at HBM offset
    /// `base`.
    pub(crate) fn hbm_at(&self, p: usize, job: &Job, base: u64) -> Location {
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
