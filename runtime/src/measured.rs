//! The measured compute model (`simulation.compute: measured`): a compute
//! kernel — one that sends nothing through the IPCQ — runs once alone on a
//! scratch copy of the machine, and every launch of the same timing shape
//! then occupies each of its PEs for the ticks that PE took there
//! ([`Op::Busy`]).
//!
//! Two launches have the same timing shape when their PEs sit at the same
//! places of SIPs of one kind and run the same ops on the same sizes from
//! the same memories relative to their SIP; addresses within a memory do
//! not enter (a load's time depends on its memory port and route, not on
//! its offset). A measured launch is exact when nothing else crosses its
//! SIP's links and memory ports while it runs; what the model leaves out
//! is that contention (docs/model.md §Measured compute).

use crate::machine::{LaunchError, Machine};
use kernbench_spec::spec::{ComputeModel, System};
use kernbench_systems::PeIdx;
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::{Launch, MemLoc, Op, Place, Program, Space};
use kernbench_systems::time::Tick;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Kernel times measured so far, and the scratch machine that measures
/// new ones.
pub struct KernelCosts {
    /// The system, its compute model set to tiled, that the scratch
    /// machine is built from on the first measurement.
    system: System,
    scratch: Option<Box<Machine>>,
    /// Busy ticks of each PE, in launch order, by timing shape.
    known: HashMap<ShapeKey, Arc<[Tick]>>,
    /// The same, by the shape key a caller gave ([`shape_key`]).
    named: HashMap<ShapeKey, Arc<[Tick]>>,
    /// Launches measured on the scratch machine, and launches that reused
    /// a measurement.
    pub measured: u64,
    pub reused: u64,
}

impl KernelCosts {
    /// The cost cache of a machine built from `system`; `None` unless its
    /// spec asks for measured compute. Measured compute computes no
    /// values, so it is refused in functional data mode.
    pub fn of(system: &System, mode: DataMode) -> Result<Option<Self>, String> {
        if system.spec.simulation.compute_model() != ComputeModel::Measured {
            return Ok(None);
        }
        if mode == DataMode::Functional {
            return Err("simulation.compute is measured, which times kernels without computing their values, and this run computes values (functional data mode); allowed: simulation.compute: tiled, or a timing-only run".into());
        }
        let mut system = system.clone();
        system.spec.simulation.compute = Some(ComputeModel::Tiled);
        Ok(Some(Self {
            system,
            scratch: None,
            known: HashMap::new(),
            named: HashMap::new(),
            measured: 0,
            reused: 0,
        }))
    }

    /// `programs` as busy programs when they are a compute kernel (each PE
    /// busy for what it took alone); unchanged when any PE sends or
    /// receives through the IPCQ, or when they are busy programs already.
    /// A caller that names the launch's timing shape (`named`, a
    /// [`shape_key`]) lets [`KernelCosts::recall`] find the next one
    /// without tracing it.
    pub fn replace(
        &mut self,
        programs: Vec<(PeIdx, Launch)>,
        named: Option<ShapeKey>,
    ) -> Result<Vec<(PeIdx, Launch)>, LaunchError> {
        let Some(ticks) = self.ticks_of(&programs)? else {
            return Ok(programs);
        };
        if let Some(key) = named {
            self.named.insert(key, ticks.clone());
        }
        Ok(programs
            .iter()
            .zip(ticks.iter())
            .map(|(&(pe, _), &t)| (pe, busy(t)))
            .collect())
    }

    /// Busy programs for `pes` when a launch named `named` was measured.
    pub fn recall(&mut self, named: &ShapeKey, pes: &[PeIdx]) -> Option<Vec<(PeIdx, Launch)>> {
        let ticks = self.named.get(named).filter(|t| t.len() == pes.len())?;
        self.reused += 1;
        Some(
            pes.iter()
                .zip(ticks.iter())
                .map(|(&pe, &t)| (pe, busy(t)))
                .collect(),
        )
    }

    /// Each PE's busy ticks, in launch order: measured now or earlier;
    /// `None` for programs that use the IPCQ or are busy programs.
    fn ticks_of(
        &mut self,
        programs: &[(PeIdx, Launch)],
    ) -> Result<Option<Arc<[Tick]>>, LaunchError> {
        let already_busy = programs
            .iter()
            .all(|(_, l)| matches!(l.program.ops[..], [Op::Busy { .. }]));
        if already_busy {
            return Ok(None);
        }
        let Some(key) = self.timing_shape(programs) else {
            return Ok(None);
        };
        if let Some(t) = self.known.get(&key) {
            self.reused += 1;
            return Ok(Some(t.clone()));
        }
        let t: Arc<[Tick]> = self.measure(programs)?.into();
        self.measured += 1;
        self.known.insert(key, t.clone());
        Ok(Some(t))
    }

    /// Runs `programs` alone on the scratch machine: each PE's ticks from
    /// its start to its finish, in launch order.
    fn measure(&mut self, programs: &[(PeIdx, Launch)]) -> Result<Vec<Tick>, LaunchError> {
        let scratch = match &mut self.scratch {
            Some(m) => m,
            None => {
                let m = Machine::build_with(&self.system, DataMode::TimingOnly)
                    .map_err(|e| LaunchError::Trace(e.to_string()))?;
                self.scratch.insert(Box::new(m))
            }
        };
        scratch.run_alone(programs.to_vec())
    }

    /// What identifies a launch's timing: its SIP's kind, and per PE its
    /// place in the SIP and its program with memories relative to the SIP
    /// and offsets dropped. `None` for a launch that uses the IPCQ.
    fn timing_shape(&self, programs: &[(PeIdx, Launch)]) -> Option<ShapeKey> {
        let sys = &self.system;
        let cubes = sys.cubes_per_sip();
        let pes = cubes * sys.pes_per_cube();
        let first = programs.first()?.0.0;
        let sip = first / pes;
        let rel = SipRelative { sip, cubes, pes };
        let mut key = KeyHasher::default();
        sys.kinds.index_of(sip).hash(&mut key);
        // Programs shared by PEs (one `Arc`) are hashed once, by index.
        let mut distinct: Vec<&Arc<Program>> = Vec::new();
        for (pe, launch) in programs {
            let p = &launch.program;
            let index = distinct
                .iter()
                .position(|q| Arc::ptr_eq(q, p))
                .unwrap_or_else(|| {
                    distinct.push(p);
                    distinct.len() - 1
                });
            (
                i64::from(pe.0) - i64::from(sip * pes),
                index,
                &launch.params,
            )
                .hash(&mut key);
        }
        for p in distinct {
            rel.hash_program(p, &mut key)?;
        }
        Some(key.finish_key())
    }
}

/// A program that keeps its PE busy for `ticks`.
fn busy(ticks: Tick) -> Launch {
    Launch {
        program: Arc::new(Program {
            ops: vec![Op::Busy { ticks }],
            ..Program::default()
        }),
        params: Box::new([]),
    }
}

/// Memories named relative to one SIP.
struct SipRelative {
    sip: u32,
    cubes: u32,
    pes: u32,
}

impl SipRelative {
    fn loc(&self, loc: MemLoc) -> MemLoc {
        if loc.instance == MemLoc::LOCAL {
            return MemLoc { offset: 0, ..loc };
        }
        let per_sip = match loc.space {
            Space::Tcm => self.pes,
            Space::Sram | Space::Hbm => self.cubes,
        };
        let instance = loc.instance.wrapping_sub(self.sip * per_sip);
        MemLoc {
            space: loc.space,
            instance,
            offset: 0,
        }
    }

    fn place(&self, p: Place) -> Place {
        match p {
            Place::Fixed { loc, elems } => Place::Fixed {
                loc: self.loc(loc),
                elems,
            },
            other => other,
        }
    }

    /// Hashes `p` with its memories relative to the SIP; `None` when it
    /// sends or receives.
    fn hash_program(&self, p: &Program, key: &mut KeyHasher) -> Option<()> {
        p.regs.hash(key);
        p.ops.len().hash(key);
        for op in &p.ops {
            let op = match *op {
                Op::Send { .. } | Op::Recv { .. } => return None,
                Op::Load { dst, src, dtype } => Op::Load {
                    dst,
                    src: self.place(src),
                    dtype,
                },
                Op::Store { src, dst } => Op::Store {
                    src,
                    dst: self.place(dst),
                },
                other => other,
            };
            crate::kernel::hash_op(&op, key);
        }
        for a in &p.atoms {
            (self.loc(a.base), a.elems, &a.digits).hash(key);
        }
        for r in &p.rects {
            let mut r = *r;
            r.loc = self.loc(r.loc);
            r.hash(key);
        }
        for t in &p.tables {
            t.hash(key);
        }
        Some(())
    }
}

/// A timing shape's fingerprint: two independent 64-bit hashes of its
/// bytes and their count, so that distinct shapes share a measurement only
/// with a probability far below one in 2^64.
pub type ShapeKey = (u64, u64, u64);

/// The key of a launch described by `parts`: what a caller of
/// [`KernelCosts::replace`] passes when `parts` fix the timing shape
/// of the programs it traces.
pub fn shape_key(parts: impl Hash) -> ShapeKey {
    let mut h = KeyHasher::default();
    parts.hash(&mut h);
    h.finish_key()
}

/// Feeds every byte to both hashes of a [`ShapeKey`].
#[derive(Default)]
struct KeyHasher {
    sip: std::hash::DefaultHasher,
    fx: rustc_hash::FxHasher,
    bytes: u64,
}

impl KeyHasher {
    fn finish_key(&self) -> ShapeKey {
        (self.sip.finish(), self.fx.finish(), self.bytes)
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.sip.write(bytes);
        self.fx.write(bytes);
        self.bytes += bytes.len() as u64;
    }

    fn finish(&self) -> u64 {
        self.sip.finish()
    }
}
