//! Kernel execution: launch, the `kernel_step` stage, remote load/store data,
//! the op log and the deadlock report.
//!
//! Each launched PE runs its op program in order. An op issues when its input
//! registers hold their values and its output register is settled; compute
//! ops occupy the PE's vector unit or MAC array (FIFO, like a link), loads and
//! stores its memory ports, sends and recvs its queues. Sends, recvs and
//! remote memory ops run asynchronously: the PE goes on to the next op, and a
//! register written by a recv or remote load is *pending* until it lands.
//!
//! Files: `step` (the stage: waking PEs and issuing in order), `issue` (what
//! each op costs and does), `host` (install and launch messages from the host,
//! remote load/store payloads), `deadlock` (the report of a run that cannot
//! finish). Trace records go to `crate::trace`.
//!
//! Layout: a running PE's state, [`PeExec`] (program, registers, units), is
//! a component on its PE entity beside its `PeRate` and `NeighborTables`,
//! and `kernel_step` reaches the PEs it wakes through one query. Resources
//! hold what is not one PE's or arrives by number: [`PeEvents`] (results
//! the queues and remote memories push for PEs, applied in arrival order),
//! [`KernelCalendar`] (wake-ups by tick), [`HostQueue`] (payloads of
//! messages in flight, keyed by message tag), [`Launches`] (the host's
//! launch records, by [`LaunchId`]), [`OpsIssued`] and [`ExecParams`].
//! Launches waiting for a busy PE queue on its `PeExec`.

mod deadlock;
mod host;
mod issue;
mod launches;
mod step;

pub use deadlock::deadlock_report;
pub use host::{HostQueue, LoadJob, StoreJob, deliver_control, send_installs, send_launches};
pub use launches::{LaunchId, LaunchRecord, Launches, QueuedLaunch};
pub use step::kernel_step;

use crate::ids::PeIdx;
use crate::memory::{DataMode, MemoryStore};
use crate::program::{Op, Place, Program, Reg};
use crate::time::{Calendar, PENDING, Tick};
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::Arc;

/// A register: when its value is usable, its size and dtype, and
/// (functional mode) the values, held as f32 and exact in the dtype. The
/// values are shared: a send or copy of the register holds them without a
/// copy (a PE that sends one buffer to many peers holds it once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegState {
    pub ready_at: Tick,
    pub elems: u64,
    pub dtype: crate::dtype::DType,
    pub data: Option<Arc<Vec<f32>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeState {
    Running,
    /// Finished; the tick at which its last op completed.
    Done(Tick),
}

/// Registers a [`PeExec`] holds inline (a ring kernel has three:
/// accumulator, received block, sum); larger programs spill to the heap.
const INLINE_REGS: usize = 4;

/// Ops issued by every PE so far: progress, for the engine's watchdog.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpsIssued(pub u64);

/// Execution state of a launched PE.
#[derive(Component, Debug, Clone)]
pub struct PeExec {
    /// The launched program (many PEs share one; it is freed when the last
    /// PE running it is launched again or despawned).
    pub program: Arc<Program>,
    /// This PE's values of the program's parameters.
    pub params: Box<[i64]>,
    /// The communicator whose queues its sends and recvs use.
    pub scope: crate::ipcq::Scope,
    /// The launch it belongs to (see [`Launches`]).
    pub launch: LaunchId,
    /// The next op; never a [`Op::Loop`] marker (entering a loop moves past it).
    pub pc: u32,
    /// The loop being run, if any.
    pub frame: Option<LoopFrame>,
    /// The registers; a few are held inline, where the PE's step reads
    /// them at every wake without another cache miss.
    pub regs: SmallVec<[RegState; INLINE_REGS]>,
    pub vector_free: Tick,
    pub mac_free: Tick,
    /// Sends and remote stores not yet complete.
    pub outstanding: u32,
    /// Registers waiting for a recv or remote load.
    pub pending_regs: u32,
    /// Latest completion tick seen.
    pub finish: Tick,
    pub started: Tick,
    pub state: PeState,
    /// Launches that reached this PE while it ran, in arrival order: the
    /// next starts when this one is done (one kernel at a time, a stream).
    pub queued: VecDeque<QueuedLaunch>,
}

/// What [`PeExec::advance`] did to the running loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopMove {
    /// Nothing: the next op is in the same iteration (or no loop runs).
    Within,
    /// Back to the start of the body for the next iteration.
    NextIteration,
    /// Out of a finished loop.
    Left,
}

/// A running loop: its body `start .. end`, the iteration and the rotating registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopFrame {
    pub start: u32,
    pub end: u32,
    pub iter: u32,
    pub count: u32,
    pub rot: Reg,
    pub rot_len: u16,
}

impl PeExec {
    /// A PE about to run a launched program from its first op at `start`.
    pub fn new(q: QueuedLaunch, start: Tick) -> PeExec {
        let QueuedLaunch {
            launch: crate::program::Launch { program, params },
            scope,
            id,
            ..
        } = q;
        let regs = smallvec::smallvec![RegState::default(); program.regs as usize];
        let mut ex = PeExec {
            program,
            params,
            scope,
            launch: id,
            pc: 0,
            frame: None,
            regs,
            vector_free: start,
            mac_free: start,
            outstanding: 0,
            pending_regs: 0,
            finish: start,
            started: start,
            state: PeState::Running,
            queued: VecDeque::new(),
        };
        ex.enter_loops();
        ex
    }

    /// The next op as it issues on this PE: registers as named in this
    /// iteration, places resolved to locations. None when the program is done.
    #[inline]
    pub fn op(&self) -> Option<Op> {
        let op = *self.program.ops.get(self.pc as usize)?;
        // Most ops issue as written: no register renamed this iteration, no place to compute.
        let renames = self.frame.is_some_and(|f| f.iter % 2 == 1 && f.rot_len > 0);
        let computed = matches!(
            op,
            Op::Load {
                src: Place::Atom(_),
                ..
            } | Op::Store {
                dst: Place::Atom(_),
                ..
            } | Op::Recv {
                size: Place::Atom(_),
                ..
            }
        );
        if !renames && !computed {
            return Some(op);
        }
        let iter = self.frame.map_or(0, |f| f.iter);
        let reg = |r: Reg| self.reg_name(r);
        let place = |p: Place| match p {
            Place::Atom(_) => {
                let (loc, elems) = self.program.place(p, &self.params, iter);
                Place::Fixed { loc, elems }
            }
            fixed => fixed,
        };
        Some(match op {
            Op::Load { dst, src, dtype } => Op::Load {
                dst: reg(dst),
                src: place(src),
                dtype,
            },
            Op::Store { src, dst } => Op::Store {
                src: reg(src),
                dst: place(dst),
            },
            Op::Send { dir, src } => Op::Send { dir, src: reg(src) },
            Op::Recv {
                dir,
                dst,
                size,
                dtype,
            } => Op::Recv {
                dir,
                dst: reg(dst),
                size: place(size),
                dtype,
            },
            Op::Binary { op, dst, a, b } => Op::Binary {
                op,
                dst: reg(dst),
                a: reg(a),
                b: reg(b),
            },
            Op::Scale { dst, src, factor } => Op::Scale {
                dst: reg(dst),
                src: reg(src),
                factor,
            },
            Op::Copy { dst, src } => Op::Copy {
                dst: reg(dst),
                src: reg(src),
            },
            Op::Cast { dst, src, to } => Op::Cast {
                dst: reg(dst),
                src: reg(src),
                to,
            },
            Op::Unary {
                op,
                dst,
                src,
                shift,
            } => Op::Unary {
                op,
                dst: reg(dst),
                src: reg(src),
                shift,
            },
            Op::RowReduce { op, dst, src, cols } => Op::RowReduce {
                op,
                dst: reg(dst),
                src: reg(src),
                cols,
            },
            Op::RowBroadcast {
                op,
                dst,
                a,
                b,
                cols,
            } => Op::RowBroadcast {
                op,
                dst: reg(dst),
                a: reg(a),
                b: reg(b),
                cols,
            },
            Op::Gemm {
                dst,
                a,
                b,
                m,
                n,
                k,
                out,
            } => Op::Gemm {
                dst: reg(dst),
                a: reg(a),
                b: reg(b),
                m,
                n,
                k,
                out,
            },
            Op::Loop { .. } | Op::Busy { .. } => op,
        })
    }

    /// The registers the next op reads (count) and writes, as named in this
    /// iteration (without resolving its places).
    #[inline]
    pub fn next_regs(&self) -> Option<([Reg; 2], usize, Option<Reg>)> {
        let op = self.program.ops.get(self.pc as usize)?;
        let (mut ins, n) = op.inputs();
        for r in &mut ins[..n] {
            *r = self.reg_name(*r);
        }
        Some((ins, n, op.output().map(|r| self.reg_name(r))))
    }

    /// Register `r` of the program as named in this iteration.
    #[inline]
    fn reg_name(&self, r: Reg) -> Reg {
        match self.frame {
            Some(f) if f.iter % 2 == 1 && r >= f.rot && r < f.rot + 2 * f.rot_len => {
                if r < f.rot + f.rot_len {
                    r + f.rot_len
                } else {
                    r - f.rot_len
                }
            }
            _ => r,
        }
    }

    /// Moves past the op just issued: to the next op, back to the start of
    /// the loop body, or out of a finished loop.
    #[inline]
    pub fn advance(&mut self) -> LoopMove {
        self.pc += 1;
        let mut moved = LoopMove::Within;
        if let Some(f) = &mut self.frame
            && self.pc == f.end
        {
            f.iter += 1;
            if f.iter < f.count {
                self.pc = f.start;
                moved = LoopMove::NextIteration;
            } else {
                self.frame = None;
                moved = LoopMove::Left;
            }
        }
        self.enter_loops();
        moved
    }

    /// At a loop marker: enter the loop (or skip an empty one).
    #[inline]
    fn enter_loops(&mut self) {
        while let Some(&Op::Loop {
            count,
            len,
            rot,
            rot_len,
        }) = self.program.ops.get(self.pc as usize)
        {
            let start = self.pc + 1;
            if count == 0 || len == 0 {
                self.pc = start + len;
                continue;
            }
            self.frame = Some(LoopFrame {
                start,
                end: start + len,
                iter: 0,
                count,
                rot,
                rot_len,
            });
            self.pc = start;
        }
    }
}

/// Control-message sizes, in bytes (a PE's throughput is its
/// [`crate::hierarchy::PeRate`]).
#[derive(Resource, Debug, Clone)]
pub struct ExecParams {
    pub launch_bytes: u64,
    pub install_entry_bytes: u64,
}

impl Default for ExecParams {
    fn default() -> Self {
        Self {
            launch_bytes: 1,
            install_entry_bytes: 1,
        }
    }
}

/// A PE-side effect of queue or remote-memory progress, applied by `kernel_step`.
#[derive(Debug, Clone)]
pub enum PeEvent {
    /// Register `reg` holds its value from tick `at`.
    Resolve {
        pe: PeIdx,
        reg: Reg,
        at: Tick,
        data: Option<Vec<f32>>,
    },
    /// An asynchronous op (send, store) finished at `at`.
    Complete { pe: PeIdx, at: Tick },
}

impl PeEvent {
    /// The tick its register holds its value or its op finished.
    pub fn at(&self) -> Tick {
        match *self {
            PeEvent::Resolve { at, .. } | PeEvent::Complete { at, .. } => at,
        }
    }
}

/// Results on their way to PEs: pushed by the queues (`ipcq`) and by remote
/// load/store deliveries, applied by `kernel_step` in the order they came.
/// Exec's own inbox, a resource because the pushers do not hold the PE.
#[derive(Resource, Debug, Default)]
pub struct PeEvents(pub Vec<PeEvent>);

/// PE wake-ups by tick.
#[derive(Resource, Debug, Default)]
pub struct KernelCalendar(pub Calendar<PeIdx>);

/// Everything `kernel_step` needs besides the PEs.
#[derive(bevy_ecs::system::SystemParam)]
pub struct KernelAccess<'w> {
    pub kcal: ResMut<'w, KernelCalendar>,
    pub issued: ResMut<'w, OpsIssued>,
    pub mode: Res<'w, DataMode>,
    pub store: ResMut<'w, MemoryStore>,
    pub host: ResMut<'w, HostQueue>,
    pub launches: ResMut<'w, Launches>,
    pub steady: ResMut<'w, crate::steady::Steady>,
}

/// The exec module: the kernel calendar, execution parameters, the host's
/// in-flight payloads and the op counter; the kernel-step stage; its calendar.
pub struct ExecPlugin;

impl crate::plugin::Plugin for ExecPlugin {
    fn build(&self, world: &mut World, schedule: &mut Schedule) {
        world.init_resource::<KernelCalendar>();
        world.init_resource::<ExecParams>();
        world.init_resource::<HostQueue>();
        world.init_resource::<OpsIssued>();
        world.init_resource::<Launches>();
        world.init_resource::<PeEvents>();
        world.init_resource::<crate::steady::Steady>();
        schedule.add_systems(
            kernel_step
                .run_if(kernel_work)
                .in_set(crate::Stage::KernelStep),
        );
        // A result due later than now needs no pass of its own now: the
        // first pass at or before its tick applies it (`kernel_step` takes
        // every result waiting) and wakes its PE at its tick, as a pass now
        // would have.
        crate::plugin::register_calendar(world, |w, now| {
            let results = w
                .resource::<PeEvents>()
                .0
                .iter()
                .map(|e| e.at().max(now))
                .min();
            let wakes = w.resource::<KernelCalendar>().0.next_due();
            results.into_iter().chain(wakes).min()
        });
    }
}

fn kernel_work(
    clock: Res<crate::time::Clock>,
    cal: Res<KernelCalendar>,
    events: Res<PeEvents>,
) -> bool {
    !events.0.is_empty() || crate::plugin::due(cal.0.next_due(), clock.now)
}
