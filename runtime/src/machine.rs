//! A built machine: the compiled topology plus an engine world holding the
//! PE entities, the link table, memory ports and the route cache.

use crate::kernel::{Kernel, trace};
use crate::measured::KernelCosts;
use crate::memory_map::MemoryMap;
use half::f16;
use kernbench_spec::spec::System;
use kernbench_spec::topology::address::{AddressResolver, Location, Space};
use kernbench_spec::topology::{Node, Topology, TopologyError, memory_classes, ns_to_ticks};
use kernbench_systems::DType;
use kernbench_systems::exec::ExecParams;
use kernbench_systems::exec::{HostQueue, LaunchId, Launches};
use kernbench_systems::hierarchy::Hardware;
use kernbench_systems::hierarchy::{HardwareNodes, PeRate, spawn_hardware};
use kernbench_systems::ipcq::{Entry, NeighborTables, QueueParams, Queues, Scope};
use kernbench_systems::memory::MemoryStore;
use kernbench_systems::memory::{DataMode, MemPorts};
use kernbench_systems::program::Launch;
use kernbench_systems::trace::{OpRecord, OpRecords, Trace, TraceSink};
use kernbench_systems::{Engine, NodeId, PeIdx, RunError, RunSummary, Tick};

pub use kernbench_systems::ipcq::Tables;

pub struct Machine {
    /// The system it was built from.
    pub system: System,
    pub topology: Topology,
    pub engine: Engine,
    pub addresses: AddressResolver,
    /// What tensors and IPCQ slot areas occupy in each memory instance.
    pub memory: MemoryMap,
    /// Communicators by scope (scope 0 is `default`, for wiring installed
    /// without a communicator).
    scopes: Vec<ScopeRecord>,
    /// Under `simulation.compute: measured`, the measured kernel times
    /// that compute launches take instead of running.
    pub costs: Option<KernelCosts>,
}

/// What a communicator scope holds on the machine, so that releasing it
/// gives everything back.
#[derive(Debug, Clone, Default)]
struct ScopeRecord {
    name: String,
    /// The PEs whose neighbour tables it placed.
    pes: Vec<PeIdx>,
    /// Its IPCQ slot areas: (memory, instance, offset).
    areas: Vec<(Space, u32, u64)>,
}

/// A submitted launch: pass it to [`Machine::wait`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a launch's timing is read by waiting for it"]
pub struct LaunchHandle(LaunchId);

/// When a launch ran, in ticks: from its first PE's start (after the launch
/// overhead) to its last PE's finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchReport {
    pub start: Tick,
    pub end: Tick,
}

impl LaunchReport {
    pub fn ticks(&self) -> Tick {
        self.end - self.start
    }
}

/// Why an install failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    /// A slot area does not fit its buffer memory.
    #[error("{0}")]
    Memory(String),
    /// A table names a PE the machine does not have.
    #[error("{0}")]
    NoSuchPe(String),
    /// A PE already holds the communicator's table.
    #[error("{0}")]
    Duplicate(String),
    /// A scope that was never opened.
    #[error("{0}")]
    NoSuchScope(String),
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Why a launch failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("kernel trace failed: {0}")]
    Trace(String),
    #[error(transparent)]
    Run(#[from] RunError),
}

impl Machine {
    /// Compiles the topology and spawns the hardware entities; functional data mode.
    pub fn build(sys: &System) -> Result<Self, TopologyError> {
        Self::build_with(sys, DataMode::Functional)
    }

    /// As [`Machine::build`], choosing whether values travel with the timing.
    pub fn build_with(sys: &System, mode: DataMode) -> Result<Self, TopologyError> {
        let topology = Topology::new(sys);
        let addresses = AddressResolver::new(sys).map_err(|problem| TopologyError {
            origin: sys.origin.clone(),
            field: "memory".into(),
            problem,
        })?;
        let links = topology.links(sys)?;
        let mut engine = Engine::new(links, Box::new(topology.clone()));
        engine.set_network_model(sys.spec.network.model);
        if let Some(ticks) = sys.spec.network.leg_span_ticks {
            engine.set_flow_leg_span(kernbench_systems::network::flow::LegSpan(ticks));
        }
        engine.set_fast_forward(sys.spec.simulation.fast_forward);
        let t = &topology;
        let nodes = HardwareNodes {
            host: t.id(Node::Host),
            pe: &|sip, cube, pe| t.id(Node::Pe { sip, cube, pe }),
            sram: &|sip, cube| t.id(Node::Sram { sip, cube }),
            hbm: &|sip, cube| t.id(Node::Hbm { sip, cube }),
        };
        let rate = |sip: u32| {
            let pe = &sys.kinds.of(sip).pe;
            PeRate {
                vector_lanes: u64::from(pe.vector_lanes),
                macs_per_tick: pe.macs_per_tick,
                launch_overhead: ns_to_ticks(sys, pe.launch_overhead_ns),
            }
        };
        spawn_hardware(
            &mut engine.world,
            t.sips,
            t.cubes_per_sip(),
            t.pes_per_cube,
            nodes,
            &rate,
        );
        let cubes = t.sips as usize * t.cubes_per_sip() as usize;
        let w = &mut engine.world;
        let pes = cubes * t.pes_per_cube as usize;
        let (mut pe_kind, mut cube_kind) = (Vec::new(), Vec::new());
        if sys.kinds.heterogeneous() {
            cube_kind = (0..cubes as u32)
                .map(|c| sys.kinds.index_of(c / t.cubes_per_sip()) as u8)
                .collect();
            pe_kind = cube_kind
                .iter()
                .flat_map(|&k| std::iter::repeat_n(k, t.pes_per_cube as usize))
                .collect();
        }
        w.insert_resource(MemPorts::new(
            memory_classes(sys)?,
            (pes, cubes),
            pe_kind,
            cube_kind,
        ));
        let c = &sys.spec.control;
        w.insert_resource(ExecParams {
            launch_bytes: c.launch_bytes,
            install_entry_bytes: c.install_entry_bytes,
        });
        w.insert_resource(QueueParams {
            credit_bytes: c.credit_bytes,
        });
        w.insert_resource(mode);
        let costs = KernelCosts::of(sys, mode).map_err(|problem| TopologyError {
            origin: sys.origin.clone(),
            field: "simulation.compute".into(),
            problem,
        })?;
        Ok(Self {
            system: sys.clone(),
            topology,
            engine,
            addresses,
            memory: MemoryMap::new(sys),
            scopes: vec![ScopeRecord {
                name: "default".into(),
                ..ScopeRecord::default()
            }],
            costs,
        })
    }

    /// Network node of PE `pe` of `cube` on `sip` (what traffic is sent
    /// between; not its [`PeIdx`]).
    pub fn pe_node(&self, sip: u32, cube: u32, pe: u32) -> NodeId {
        self.topology.id(Node::Pe { sip, cube, pe })
    }

    /// Global index of PE `pe` of `cube` on `sip` (the engine's PE
    /// numbering: what launches and neighbour tables name).
    pub fn pe_index(&self, sip: u32, cube: u32, pe: u32) -> PeIdx {
        PeIdx((sip * self.topology.cubes_per_sip() + cube) * self.topology.pes_per_cube + pe)
    }
}

impl Machine {
    /// Opens a communicator scope named `name`: its queues are its own.
    pub fn open_scope(&mut self, name: &str) -> Scope {
        self.scopes.push(ScopeRecord {
            name: name.into(),
            ..ScopeRecord::default()
        });
        Scope((self.scopes.len() - 1) as u32)
    }

    /// The name of a communicator scope.
    pub fn scope_name(&self, scope: Scope) -> &str {
        self.scopes.get(scope.0 as usize).map_or("?", |s| &s.name)
    }

    /// Bytes of `space` that the slot areas of `scope` hold in all.
    pub fn scope_bytes(&self, scope: Scope, space: Space) -> u64 {
        self.scopes.get(scope.0 as usize).map_or(0, |s| {
            s.areas
                .iter()
                .filter(|a| a.0 == space)
                .map(|&(sp, instance, offset)| self.memory.allocation(sp, instance, offset))
                .sum()
        })
    }

    /// Gives back what communicator `scope` holds: its slot areas are freed
    /// for later allocations and its neighbour tables leave its PEs, so
    /// nothing can run on it any more (installing it again is a new scope,
    /// whose tables take their install time again). Call it only when no
    /// launch of the scope is running. Returns the bytes freed.
    pub fn release_scope(&mut self, scope: Scope) -> Result<u64, InstallError> {
        let record = self
            .scopes
            .get_mut(scope.0 as usize)
            .map(std::mem::take)
            .ok_or_else(|| {
                InstallError::NoSuchScope(format!(
                    "communicator scope {scope} was never opened (this machine has scopes 0..{}); release only a scope a communicator holds",
                    self.scopes.len()
                ))
            })?;
        let mut freed = 0;
        for &(space, instance, offset) in &record.areas {
            freed += self.memory.allocation(space, instance, offset);
            self.memory
                .free(space, instance, offset)
                .map_err(InstallError::Memory)?;
        }
        let world = &mut self.engine.world;
        for &pe in &record.pes {
            let entity = world.resource::<Hardware>().pe_entity(pe);
            if let Some(mut tables) = world.get_mut::<NeighborTables>(entity) {
                tables.0.retain(|(s, _)| *s != scope);
            }
        }
        for q in &mut world.resource_mut::<Queues>().list {
            if q.scope == scope {
                q.installed = false;
                q.slots = Vec::new();
            }
        }
        self.scopes[scope.0 as usize].name = format!("{} (released)", record.name);
        Ok(freed)
    }

    /// [`Machine::install_scope`] on the default scope.
    pub fn install(&mut self, tables: Tables) -> Result<Tick, InstallError> {
        self.install_scope(Scope::DEFAULT, tables)
    }

    /// Places every queue's slot area in its buffer memory (top down, see
    /// [`MemoryMap`]), sends the neighbour tables of communicator `scope`
    /// from the host and runs until every one is applied; returns the tick
    /// at which the last install landed. Nothing is sent if any PE is
    /// missing, already holds this scope's table, or any area does not fit.
    pub fn install_scope(&mut self, scope: Scope, tables: Tables) -> Result<Tick, InstallError> {
        let tables = self.place_scope(scope, tables)?;
        self.land_scope(scope, tables, 0)
    }

    /// The first half of [`Machine::install_scope`], which takes no
    /// simulated time: checks the tables and places every queue's slot area
    /// (each entry's `base`); the tables are then ready for
    /// [`Machine::land_scope`].
    pub fn place_scope(
        &mut self,
        scope: Scope,
        mut tables: Tables,
    ) -> Result<Tables, InstallError> {
        self.check_install(scope, &tables)?;
        let mut memory = self.memory.clone();
        let mut placed = ScopeRecord::default();
        for (pe, entries) in &mut tables {
            placed.pes.push(*pe);
            for e in entries.iter_mut() {
                let instance = memory.instance_of(e.buffer, *pe);
                let bytes = u64::from(e.n_slots).saturating_mul(e.slot_size);
                let what = || {
                    format!(
                        "the IPCQ slot area of queue {} of communicator '{}' ({} slots x {} B)",
                        e.dir.name(),
                        self.scope_name(scope),
                        e.n_slots,
                        e.slot_size
                    )
                };
                e.base = memory
                    .alloc_top(e.buffer, instance, bytes, &what)
                    .map_err(InstallError::Memory)?;
                placed.areas.push((e.buffer, instance, e.base));
            }
        }
        self.memory = memory;
        if let Some(record) = self.scopes.get_mut(scope.0 as usize) {
            record.pes.extend(placed.pes);
            record.areas.extend(placed.areas);
        }
        Ok(tables)
    }

    /// The second half of [`Machine::install_scope`]: sends placed tables
    /// from the host at tick `at` (or now, if later) and runs until every
    /// one is applied (other submitted work runs alongside on the same
    /// clock); the tick at which the last landed.
    pub fn land_scope(
        &mut self,
        scope: Scope,
        tables: Tables,
        at: Tick,
    ) -> Result<Tick, InstallError> {
        self.engine.install(scope, tables, at);
        let landed = self
            .engine
            .run_until(|w| w.resource::<HostQueue>().installs.is_empty())?;
        if !landed {
            self.engine.finish()?;
        }
        Ok(self.engine.now())
    }

    /// Every PE of `tables` exists and holds no table of `scope` yet.
    fn check_install(
        &self,
        scope: Scope,
        tables: &[(PeIdx, Vec<Entry>)],
    ) -> Result<(), InstallError> {
        let pes = self.topology.n_pes();
        let hw = self.engine.world.resource::<Hardware>();
        for (pe, entries) in tables {
            let bad = std::iter::once(*pe)
                .chain(entries.iter().map(|e| e.peer))
                .find(|&p| u64::from(p.0) >= pes);
            if let Some(p) = bad {
                return Err(InstallError::NoSuchPe(format!(
                    "the neighbour table of PE {pe} names PE {p}, but the machine has {pes} PEs \
                     (0..{pes}; a PE's index is (sip · cubes per SIP + cube) · PEs per cube + pe, see Machine::pe_index)"
                )));
            }
            let held = self
                .engine
                .world
                .get::<NeighborTables>(hw.pe_entity(*pe))
                .is_some_and(|t| t.get(scope).is_some());
            if held {
                let (s, c, p) = hw.coords(*pe);
                return Err(InstallError::Duplicate(format!(
                    "sip{s}.cube{c}.pe{p} already holds the neighbour table of communicator '{}' (scope {scope}); a communicator is installed once per PE: create a new communicator for other wiring",
                    self.scope_name(scope)
                )));
            }
        }
        Ok(())
    }

    /// Traces `kernel` for each PE in `pes` (global indices), launches it from
    /// the host and runs until every PE has finished (or the run deadlocks).
    /// The summary's kernel start and end are this launch's.
    pub fn launch<A>(
        &mut self,
        kernel: Kernel<A>,
        args: &A,
        pes: &[PeIdx],
    ) -> Result<RunSummary, LaunchError> {
        let h = self.submit(kernel, args, pes, Scope::DEFAULT, 0)?;
        let mut run = self.synchronize()?;
        let r = self.wait(h)?;
        (run.kernel_start, run.kernel_end) = (r.start, r.end);
        Ok(run)
    }

    /// Traces `kernel` for each PE in `pes` and sends the launch from the
    /// host at tick `at` (or now, if later) under communicator `scope`;
    /// nothing runs until [`Machine::wait`] or [`Machine::synchronize`]. A
    /// PE still running an earlier kernel starts this one when it finishes.
    pub fn submit<A>(
        &mut self,
        kernel: Kernel<A>,
        args: &A,
        pes: &[PeIdx],
        scope: Scope,
        at: Tick,
    ) -> Result<LaunchHandle, LaunchError> {
        let total = self.topology.n_pes();
        if let Some(&p) = pes.iter().find(|&&p| u64::from(p.0) >= total) {
            return Err(LaunchError::Trace(format!(
                "PE {p} does not exist: the machine has {total} PEs (see Machine::pe_index)"
            )));
        }
        let programs = self.trace(kernel, args, pes)?;
        self.submit_programs(programs, scope, at)
    }

    /// Sends traced programs (see [`Machine::trace`]) as one launch; under
    /// measured compute, a compute kernel goes as the time it takes alone
    /// (measured on first sight: [`KernelCosts`]).
    pub fn submit_programs(
        &mut self,
        programs: Vec<(PeIdx, Launch)>,
        scope: Scope,
        at: Tick,
    ) -> Result<LaunchHandle, LaunchError> {
        let programs = match &mut self.costs {
            Some(costs) => costs.replace(programs, None)?,
            None => programs,
        };
        Ok(LaunchHandle(self.engine.launch(scope, programs, at)))
    }

    /// Runs `programs` as one launch from now, on a machine with nothing
    /// else to do, and returns each PE's ticks from its start to its
    /// finish, in launch order.
    pub fn run_alone(&mut self, programs: Vec<(PeIdx, Launch)>) -> Result<Vec<Tick>, LaunchError> {
        let pes: Vec<PeIdx> = programs.iter().map(|&(pe, _)| pe).collect();
        let h = self.submit_programs(programs, Scope::DEFAULT, self.engine.now())?;
        self.wait(h)?;
        Ok(pes
            .iter()
            .map(|&pe| self.engine.pe_span(pe).map_or(0, |(s, e)| e - s))
            .collect())
    }

    /// Whether a submitted launch has finished (without running anything).
    pub fn finished(&self, h: &LaunchHandle) -> bool {
        self.engine.world.resource::<Launches>().finished(h.0)
    }

    /// Runs the simulation until the launch has finished (other work goes
    /// on alongside on the same clock) and reports when it ran.
    pub fn wait(&mut self, h: LaunchHandle) -> Result<LaunchReport, LaunchError> {
        self.run_until_any(&[&h])?;
        let r = self
            .engine
            .take_launch(h.0)
            .ok_or_else(|| LaunchError::Trace("a launch handle was waited for twice".into()))?;
        let start = if r.pes == 0 {
            self.engine.now()
        } else {
            r.start
        };
        Ok(LaunchReport {
            start,
            end: r.end.max(start),
        })
    }

    /// Runs the simulation until at least one of `handles` has finished;
    /// when nothing is due before that, says why (the deadlock report).
    pub fn run_until_any(&mut self, handles: &[&LaunchHandle]) -> Result<(), LaunchError> {
        let ids: Vec<LaunchId> = handles.iter().map(|h| h.0).collect();
        let any = |w: &bevy_ecs::world::World| {
            let l = w.resource::<Launches>();
            ids.iter().any(|&id| l.finished(id))
        };
        if !self.engine.run_until(any)? {
            self.engine.finish()?;
            return Err(LaunchError::Run(RunError::Deadlock(format!(
                "nothing is due, and none of the {} awaited launch(es) has finished",
                ids.len()
            ))));
        }
        Ok(())
    }

    /// Runs until nothing is due: every submitted launch has finished.
    pub fn synchronize(&mut self) -> Result<RunSummary, LaunchError> {
        Ok(self.engine.run()?)
    }

    /// What [`Machine::launch`] would launch: each PE's program (shared
    /// between PEs whose traces are the same) and parameter values.
    pub fn trace<A>(
        &self,
        kernel: Kernel<A>,
        args: &A,
        pes: &[PeIdx],
    ) -> Result<Vec<(PeIdx, Launch)>, LaunchError> {
        let (cps, ppc) = (self.topology.cubes_per_sip(), self.topology.pes_per_cube);
        let coords: Vec<(PeIdx, [u32; 3])> = pes
            .iter()
            .map(|&pe| (pe, [pe.0 / ppc / cps, (pe.0 / ppc) % cps, pe.0 % ppc]))
            .collect();
        trace(kernel, args, &coords, &self.addresses, &self.topology).map_err(LaunchError::Trace)
    }

    /// Writes f16 values into memory (functional mode).
    pub fn write(&mut self, at: Location, data: &[f16]) -> Result<(), String> {
        let values: Vec<f32> = data.iter().map(|v| v.to_f32()).collect();
        self.write_as(at, DType::F16, &values)
    }

    /// Writes values of `dtype` (each rounded to it) into memory (functional mode).
    pub fn write_as(&mut self, at: Location, dtype: DType, data: &[f32]) -> Result<(), String> {
        self.addresses.encode(at)?;
        let loc = self.addresses.mem_loc(&self.topology, at);
        let values: Vec<f32> = data.iter().map(|&v| dtype.round(v)).collect();
        self.engine
            .world
            .resource_mut::<MemoryStore>()
            .write(loc, dtype, &values)
    }

    /// Reads f16 values from memory (functional mode).
    pub fn read(&self, at: Location, elems: usize) -> Result<Vec<f16>, String> {
        let values = self.read_as(at, elems, DType::F16)?;
        Ok(values.into_iter().map(f16::from_f32).collect())
    }

    /// Reads `elems` values of `dtype` from memory (functional mode).
    pub fn read_as(&self, at: Location, elems: usize, dtype: DType) -> Result<Vec<f32>, String> {
        self.addresses.encode(at)?;
        let loc = self.addresses.mem_loc(&self.topology, at);
        self.engine
            .world
            .resource::<MemoryStore>()
            .read(loc, elems as u64, dtype)
    }

    /// Sends every later op, packet and message to `sink` as it completes
    /// (off by default: large runs trace nothing).
    pub fn trace_to(&mut self, sink: Box<dyn TraceSink>) {
        self.engine.world.resource_mut::<Trace>().set_sink(sink);
    }

    /// Stops tracing and gives the sink back.
    pub fn take_trace(&mut self) -> Option<Box<dyn TraceSink>> {
        self.engine.world.resource_mut::<Trace>().take_sink()
    }

    /// Keeps a record of every later op in memory (for tests and small
    /// runs; a file trace streams instead); read it with [`Machine::op_records`].
    pub fn record_ops(&mut self) {
        self.trace_to(Box::new(OpRecords::default()));
    }

    /// The ops recorded since [`Machine::record_ops`], in the order each
    /// finished (per PE: start order); empty when not recording.
    pub fn op_records(&self) -> Vec<OpRecord> {
        self.engine
            .world
            .resource::<Trace>()
            .sink::<OpRecords>()
            .map(|r| r.0.clone())
            .unwrap_or_default()
    }
}
