//! Kernel execution: launch, the `kernel_step` stage, remote load/store data,
//! the op log and the deadlock report.
//!
//! Each launched PE runs its op program in order. An op issues when its input
//! registers hold their values and its output register is settled; compute
//! ops occupy the PE's vector unit or MAC array (FIFO, like a link), loads and
//! stores its memory ports, sends and recvs its queues. Sends, recvs and
//! remote memory ops run asynchronously: the PE goes on to the next op, and a
//! register written by a recv or remote load is *pending* until it lands.

use crate::hierarchy::Hardware;
use crate::ipcq::{
    Entry, NeighborTable, PeEvent, QueueAccess, RecvJob, SendJob, Slot, SlotState, pump_recv,
    pump_send,
};
use crate::memory::{DataMode, ELEM_BYTES, MemoryStore};
use crate::network::{Inbox, Outbox, Purpose, Send};
use crate::program::{BinOp, MemLoc, Op, Program, Reg, Space};
use crate::time::{Calendar, Clock, Tick};
use bevy_ecs::prelude::*;
use half::f16;
use std::sync::Arc;

/// `ready_at` of a register whose value has not landed yet.
pub const PENDING: Tick = Tick::MAX;

/// A register: when its value is usable, its size, and (functional mode) the values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegState {
    pub ready_at: Tick,
    pub elems: u64,
    pub data: Option<Vec<f16>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeState {
    Running,
    /// Finished; the tick at which its last op completed.
    Done(Tick),
}

/// Ops issued by every PE so far: progress, for the engine's watchdog.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpsIssued(pub u64);

/// Execution state of a launched PE.
#[derive(Component, Debug, Clone)]
pub struct PeExec {
    /// The launched program (many PEs share one; it is freed when the last
    /// PE running it is launched again or despawned).
    pub program: Arc<Program>,
    pub pc: u32,
    pub regs: Vec<RegState>,
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
}

/// PE throughput and control-message sizes, in ticks and bytes.
#[derive(Resource, Debug, Clone)]
pub struct ExecParams {
    pub vector_lanes: u64,
    pub macs_per_tick: u64,
    pub launch_overhead: Tick,
    pub launch_bytes: u64,
    pub install_entry_bytes: u64,
}

impl Default for ExecParams {
    fn default() -> Self {
        Self {
            vector_lanes: 1,
            macs_per_tick: 1,
            launch_overhead: 0,
            launch_bytes: 1,
            install_entry_bytes: 1,
        }
    }
}

/// PE wake-ups by tick.
#[derive(Resource, Debug, Default)]
pub struct KernelCalendar(pub Calendar<u32>);

/// Payloads of install and launch messages in flight from the host, and of
/// remote loads and stores in flight, keyed by their message's tag. A slot
/// is freed when its message is delivered, so the queue holds only what is
/// in flight.
#[derive(Resource, Debug, Default)]
pub struct HostQueue {
    pub installs: slab::Slab<(u32, Vec<Entry>)>,
    pub launches: slab::Slab<(u32, Arc<Program>)>,
    pub stores: slab::Slab<StoreJob>,
    pub loads: slab::Slab<LoadJob>,
    installed: rustc_hash::FxHashSet<u32>,
}

/// A load's data travelling from a remote memory.
#[derive(Debug, Clone, Copy)]
pub struct LoadJob {
    pub pe: u32,
    pub reg: Reg,
    pub oplog: Option<u32>,
}

/// A store travelling to a remote memory.
#[derive(Debug, Clone, Copy)]
pub struct StoreJob {
    pub pe: u32,
    pub dst: MemLoc,
    pub bytes: u64,
    pub oplog: Option<u32>,
}

/// One record per op (ADR-0052).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    pub op: &'static str,
    pub sip: u32,
    pub cube: u32,
    pub pe: u32,
    pub start: Tick,
    /// `PENDING` until an asynchronous op completes.
    pub end: Tick,
    pub bytes: u64,
    pub params: String,
}

/// The op log; off for large runs.
#[derive(Resource, Debug, Default)]
pub struct OpLog {
    pub enabled: bool,
    pub records: Vec<OpRecord>,
}

impl OpLog {
    fn record(
        &mut self,
        hw: &Hardware,
        pe: u32,
        op: &'static str,
        start: Tick,
        end: Tick,
        bytes: u64,
        params: impl FnOnce() -> String,
    ) -> Option<u32> {
        if !self.enabled {
            return None;
        }
        let (sip, cube, local) = hw.coords(pe);
        self.records.push(OpRecord {
            op,
            sip,
            cube,
            pe: local,
            start,
            end,
            bytes,
            params: params(),
        });
        Some(self.records.len() as u32 - 1)
    }

    /// Sets the end of an asynchronous op's record.
    pub fn finish(&mut self, idx: Option<u32>, end: Tick) {
        if let Some(i) = idx {
            self.records[i as usize].end = end;
        }
    }

    /// The log as CSV (header + one line per op).
    pub fn to_csv(&self) -> String {
        let mut s = String::from("op,sip,cube,pe,start,end,bytes,params\n");
        for r in &self.records {
            s.push_str(&format!(
                "{},{},{},{},{},{},{},\"{}\"\n",
                r.op,
                r.sip,
                r.cube,
                r.pe,
                r.start,
                r.end,
                r.bytes,
                r.params.replace('"', "'")
            ));
        }
        s
    }
}

/// Everything `kernel_step` needs besides the PEs.
#[derive(bevy_ecs::system::SystemParam)]
pub struct KernelAccess<'w> {
    pub kcal: ResMut<'w, KernelCalendar>,
    pub issued: ResMut<'w, OpsIssued>,
    pub params: Res<'w, ExecParams>,
    pub mode: Res<'w, DataMode>,
    pub store: ResMut<'w, MemoryStore>,
    pub host: ResMut<'w, HostQueue>,
}

/// The `kernel_step` stage: applies queue results to PEs, then lets every PE
/// woken now issue ops until it blocks. PEs woken in the same tick step in PE
/// index order.
pub fn kernel_step(
    mut pes: Query<(&mut PeExec, Option<&NeighborTable>)>,
    mut ka: KernelAccess,
    mut qa: QueueAccess,
) {
    let now = qa.clock.now;
    let mut woken: Vec<u32> = ka.kcal.0.take_due(now).unwrap_or_default();
    loop {
        for ev in std::mem::take(&mut qa.queues.pe_events) {
            let (pe, reg, at) = match ev {
                PeEvent::Resolve { pe, reg, at, .. } => (pe, Some(reg), at),
                PeEvent::Complete { pe, at } => (pe, None, at),
            };
            let Ok((mut ex, _)) = pes.get_mut(qa.hw.pes[pe as usize]) else {
                continue;
            };
            match ev {
                PeEvent::Resolve { reg, data, .. } => {
                    let r = &mut ex.regs[reg as usize];
                    r.ready_at = at;
                    if data.is_some() {
                        r.data = data;
                    }
                    ex.pending_regs -= 1;
                }
                PeEvent::Complete { .. } => ex.outstanding -= 1,
            }
            ex.finish = ex.finish.max(at);
            // Wake the PE only if it waits for this: its current op touches the
            // register, or it has issued everything and waits to finish.
            let waits = match (ex.program.ops.get(ex.pc as usize), reg) {
                (None, _) => true,
                (Some(op), Some(reg)) => {
                    let (inputs, n) = op.inputs();
                    inputs[..n].contains(&reg) || op.output() == Some(reg)
                }
                (Some(_), None) => false,
            };
            if !waits {
                continue;
            }
            if at > now {
                ka.kcal.0.push(at, pe);
            } else {
                woken.push(pe);
            }
        }
        if woken.is_empty() {
            break;
        }
        woken.sort_unstable();
        woken.dedup();
        for pe in woken.drain(..) {
            let Ok((mut ex, table)) = pes.get_mut(qa.hw.pes[pe as usize]) else {
                continue;
            };
            if let Err(e) = step(pe, &mut ex, table, &mut ka, &mut qa) {
                qa.errors.report(e);
                return;
            }
        }
    }
}

/// Issues ops of one PE until it blocks or finishes.
fn step(
    pe: u32,
    ex: &mut PeExec,
    table: Option<&NeighborTable>,
    ka: &mut KernelAccess,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    if ex.state != PeState::Running {
        return Ok(());
    }
    let KernelAccess {
        kcal,
        issued,
        params,
        mode,
        store,
        host,
    } = ka;
    let program = Arc::clone(&ex.program);
    let mut ic = IssueCtx {
        params,
        functional: **mode == DataMode::Functional,
        store,
        host,
    };
    while let Some(op) = program.ops.get(ex.pc as usize) {
        let (inputs, n) = op.inputs();
        for &r in inputs[..n].iter().chain(op.output().as_ref()) {
            match ex.regs[r as usize].ready_at {
                PENDING => return Ok(()),
                t if t > now => {
                    kcal.0.push(t, pe);
                    return Ok(());
                }
                _ => {}
            }
        }
        issue(pe, ex, op, table, &mut ic, qa).map_err(|e| {
            let (s, c, p) = qa.hw.coords(pe);
            format!("sip{s}.cube{c}.pe{p}: op {} ({}): {e}", ex.pc, op.name())
        })?;
        ex.pc += 1;
        issued.0 += 1;
    }
    if ex.outstanding == 0 && ex.pending_regs == 0 {
        ex.state = PeState::Done(ex.finish.max(ex.started));
    }
    Ok(())
}

fn elementwise(op: BinOp, a: &[f16], b: &[f16]) -> Vec<f16> {
    let f = |x: f16, y: f16| {
        let (x, y) = (x.to_f32(), y.to_f32());
        f16::from_f32(match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Max => x.max(y),
            BinOp::Min => x.min(y),
        })
    };
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

fn gemm(a: &[f16], b: &[f16], m: usize, n: usize, k: usize) -> Vec<f16> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let acc: f32 = (0..k)
                .map(|p| a[i * k + p].to_f32() * b[p * n + j].to_f32())
                .sum();
            out.push(f16::from_f32(acc));
        }
    }
    out
}

/// Issues one op at `now`.
/// What issuing an op touches besides the queues.
struct IssueCtx<'a> {
    params: &'a ExecParams,
    functional: bool,
    store: &'a mut MemoryStore,
    host: &'a mut HostQueue,
}

fn issue(
    pe: u32,
    ex: &mut PeExec,
    op: &Op,
    table: Option<&NeighborTable>,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    let functional = ka.functional;
    let hw = &*qa.hw;
    match *op {
        Op::Binary { op: bop, dst, a, b } => {
            let (ra, rb) = (&ex.regs[a as usize], &ex.regs[b as usize]);
            if ra.elems != rb.elems {
                return Err(format!(
                    "operands have {} and {} elements",
                    ra.elems, rb.elems
                ));
            }
            let elems = ra.elems;
            let data = functional.then(|| {
                elementwise(
                    bop,
                    ra.data.as_deref().unwrap_or(&[]),
                    rb.data.as_deref().unwrap_or(&[]),
                )
            });
            let done = vector(ex, now, elems, ka.params.vector_lanes);
            qa.oplog
                .record(hw, pe, bop.name(), now, done, elems * ELEM_BYTES, || {
                    format!("elems={elems}")
                });
            set(ex, dst, done, elems, data);
        }
        Op::Scale { dst, src, factor } => {
            let r = &ex.regs[src as usize];
            let elems = r.elems;
            let data = functional.then(|| {
                r.data
                    .as_deref()
                    .unwrap_or(&[])
                    .iter()
                    .map(|x| f16::from_f32(x.to_f32() * f16::from_f32(factor).to_f32()))
                    .collect()
            });
            let done = vector(ex, now, elems, ka.params.vector_lanes);
            qa.oplog
                .record(hw, pe, "scale", now, done, elems * ELEM_BYTES, || {
                    format!("elems={elems} factor={factor}")
                });
            set(ex, dst, done, elems, data);
        }
        Op::Copy { dst, src } => {
            let r = &ex.regs[src as usize];
            let (elems, data) = (r.elems, r.data.clone());
            let done = vector(ex, now, elems, ka.params.vector_lanes);
            qa.oplog
                .record(hw, pe, "copy", now, done, elems * ELEM_BYTES, || {
                    format!("elems={elems}")
                });
            set(ex, dst, done, elems, data);
        }
        Op::Gemm { dst, a, b, m, n, k } => {
            let (ra, rb) = (&ex.regs[a as usize], &ex.regs[b as usize]);
            if ra.elems != u64::from(m) * u64::from(k) || rb.elems != u64::from(k) * u64::from(n) {
                return Err(format!(
                    "gemm {m}x{k} · {k}x{n} got operands of {} and {} elements",
                    ra.elems, rb.elems
                ));
            }
            let data = functional.then(|| {
                gemm(
                    ra.data.as_deref().unwrap_or(&[]),
                    rb.data.as_deref().unwrap_or(&[]),
                    m as usize,
                    n as usize,
                    k as usize,
                )
            });
            let macs = m as u64 * n as u64 * k as u64;
            let start = now.max(ex.mac_free);
            let done = start + macs.div_ceil(ka.params.macs_per_tick);
            ex.mac_free = done;
            qa.oplog.record(
                hw,
                pe,
                "gemm",
                now,
                done,
                (u64::from(m) * u64::from(k)
                    + u64::from(k) * u64::from(n)
                    + u64::from(m) * u64::from(n))
                    * ELEM_BYTES,
                || format!("m={m} n={n} k={k}"),
            );
            set(ex, dst, done, u64::from(m) * u64::from(n), data);
        }
        Op::Load { dst, src, elems } => {
            let src = src.resolve(pe, hw.pes_per_cube);
            let bytes = elems * ELEM_BYTES;
            let data = if functional {
                Some(ka.store.read(src, elems)?)
            } else {
                None
            };
            let done = qa.ports.access(src.space, src.instance, now, bytes);
            let local = src.space == Space::Tcm && src.instance == pe;
            if local {
                qa.oplog.record(hw, pe, "load", now, done, bytes, || {
                    format!("{}{}+{:#x}", src.space.name(), src.instance, src.offset)
                });
                set(ex, dst, done, elems, data);
            } else {
                let oplog = qa.oplog.record(hw, pe, "load", now, PENDING, bytes, || {
                    format!("{}{}+{:#x}", src.space.name(), src.instance, src.offset)
                });
                set(ex, dst, PENDING, elems, data);
                ex.pending_regs += 1;
                let tag = ka.host.loads.insert(LoadJob {
                    pe,
                    reg: dst,
                    oplog,
                }) as u64;
                qa.outbox.send(Send {
                    src: hw.mem_node(src),
                    dst: hw.pe_nodes[pe as usize],
                    bytes,
                    at: done,
                    purpose: Purpose::LoadData,
                    tag,
                    route: None,
                });
            }
        }
        Op::Store { src, dst } => {
            let dst = dst.resolve(pe, hw.pes_per_cube);
            let r = &ex.regs[src as usize];
            let bytes = r.elems * ELEM_BYTES;
            if let Some(d) = &r.data {
                ka.store.write(dst, d)?;
            }
            if dst.space == Space::Tcm && dst.instance == pe {
                let done = qa.ports.access(dst.space, dst.instance, now, bytes);
                qa.oplog.record(hw, pe, "store", now, done, bytes, || {
                    format!("{}{}+{:#x}", dst.space.name(), dst.instance, dst.offset)
                });
                ex.finish = ex.finish.max(done);
            } else {
                let oplog = qa.oplog.record(hw, pe, "store", now, PENDING, bytes, || {
                    format!("{}{}+{:#x}", dst.space.name(), dst.instance, dst.offset)
                });
                let tag = ka.host.stores.insert(StoreJob {
                    pe,
                    dst,
                    bytes,
                    oplog,
                }) as u64;
                ex.outstanding += 1;
                qa.outbox.send(Send {
                    src: hw.pe_nodes[pe as usize],
                    dst: hw.mem_node(dst),
                    bytes,
                    at: now,
                    purpose: Purpose::StoreData,
                    tag,
                    route: None,
                });
            }
        }
        Op::Send { dir, src } => {
            let (e, q) = table.and_then(|t| t.send(dir)).ok_or_else(|| {
                format!(
                    "send on {}: this PE has no neighbour-table entry for {}",
                    dir.name(),
                    dir.name()
                )
            })?;
            let r = &ex.regs[src as usize];
            let bytes = r.elems * ELEM_BYTES;
            let oplog = qa.oplog.record(hw, pe, "send", now, PENDING, bytes, || {
                format!("dir={} peer={}", dir.name(), e.peer)
            });
            ex.outstanding += 1;
            let data = if functional { r.data.clone() } else { None };
            let (mut ctx, _) = qa.ctx();
            if bytes == 0 {
                ctx.oplog.finish(oplog, now);
                ctx.queues.pe_events.push(PeEvent::Complete { pe, at: now });
            } else {
                ctx.queues.list[q as usize].sends.push_back(SendJob {
                    pe,
                    bytes,
                    sent: 0,
                    data,
                    oplog,
                });
                pump_send(&mut ctx, q);
            }
        }
        Op::Recv { dir, dst, elems } => {
            let q = table.and_then(|t| t.recv(dir)).ok_or_else(|| {
                format!(
                    "recv on {}: this PE has no neighbour-table entry for {}",
                    dir.name(),
                    dir.name()
                )
            })?;
            let bytes = elems * ELEM_BYTES;
            let oplog = qa.oplog.record(hw, pe, "recv", now, PENDING, bytes, || {
                format!("dir={}", dir.name())
            });
            set(ex, dst, PENDING, elems, None);
            ex.pending_regs += 1;
            let (mut ctx, _) = qa.ctx();
            ctx.queues.list[q as usize].recvs.push_back(RecvJob {
                pe,
                reg: dst,
                bytes,
                got: 0,
                landing: 0,
                ready: now,
                data: Vec::new(),
                oplog,
            });
            pump_recv(&mut ctx, q)?;
        }
    }
    Ok(())
}

/// Occupies the vector unit for `elems` elements; returns the completion tick.
fn vector(ex: &mut PeExec, now: Tick, elems: u64, lanes: u64) -> Tick {
    let start = now.max(ex.vector_free);
    ex.vector_free = start + elems.div_ceil(lanes);
    ex.vector_free
}

fn set(ex: &mut PeExec, reg: Reg, ready_at: Tick, elems: u64, data: Option<Vec<f16>>) {
    if ready_at != PENDING {
        ex.finish = ex.finish.max(ready_at);
    }
    ex.regs[reg as usize] = RegState {
        ready_at,
        elems,
        data,
    };
}

/// Delivery of host messages and remote memory data: installs neighbour
/// tables (creating each receive queue and its slot entities), starts
/// launched programs after the launch overhead, lands remote loads, and
/// completes remote stores through the target memory's port.
pub fn deliver_control(
    inbox: &mut Inbox,
    ka: &mut KernelAccess,
    qa: &mut QueueAccess,
    running: &Query<&PeExec>,
    commands: &mut Commands,
) {
    let now = qa.clock.now;
    let installs = inbox.take(Purpose::Install);
    for a in &installs {
        let (pe, entries) = ka.host.installs.remove(a.tag as usize);
        if !ka.host.installed.insert(pe) {
            let (s, c, p) = qa.hw.coords(pe);
            qa.errors.report(format!("sip{s}.cube{c}.pe{p}: neighbour table installed twice; install each PE once per process group"));
            continue;
        }
        let mut send_q = Vec::with_capacity(entries.len());
        let mut recv_q = Vec::with_capacity(entries.len());
        for e in &entries {
            send_q.push(qa.queues.queue(e.peer, e.peer_dir));
            let q = qa.queues.queue(pe, e.dir);
            recv_q.push(q);
            let (buffer_instance, buffer_node) = match e.buffer {
                Space::Tcm => (pe, qa.hw.pe_nodes[pe as usize]),
                space => {
                    let cube = pe / qa.hw.pes_per_cube;
                    (
                        cube,
                        qa.hw.mem_node(MemLoc {
                            space,
                            instance: cube,
                            offset: 0,
                        }),
                    )
                }
            };
            let slots = (0..e.n_slots)
                .map(|index| {
                    commands
                        .spawn(Slot {
                            queue: q,
                            index,
                            state: SlotState::Free,
                            bytes: 0,
                        })
                        .id()
                })
                .collect();
            let qu = &mut qa.queues.list[q as usize];
            qu.installed = true;
            qu.sender_pe = Some(e.peer);
            qu.buffer = e.buffer;
            qu.buffer_instance = buffer_instance;
            qu.buffer_node = buffer_node;
            qu.base = e.base;
            qu.n_slots = e.n_slots;
            qu.slot_size = e.slot_size;
            qu.slots = slots;
            qu.credits = e.n_slots;
            qa.queues.kick.push(q);
        }
        commands
            .entity(qa.hw.pes[pe as usize])
            .insert(NeighborTable {
                entries,
                send_q,
                recv_q,
            });
    }
    inbox.restore(Purpose::Install, installs);

    let launches = inbox.take(Purpose::Launch);
    for a in &launches {
        let (pe, program) = ka.host.launches.remove(a.tag as usize);
        let regs = program.regs as usize;
        let entity = qa.hw.pes[pe as usize];
        if running
            .get(entity)
            .is_ok_and(|ex| ex.state == PeState::Running)
        {
            let (s, c, p) = qa.hw.coords(pe);
            qa.errors.report(format!(
                "sip{s}.cube{c}.pe{p}: launched while its previous kernel is still running"
            ));
            continue;
        }
        let start = now + ka.params.launch_overhead;
        let regs = vec![RegState::default(); regs];
        commands.entity(entity).insert(PeExec {
            program,
            pc: 0,
            regs,
            vector_free: start,
            mac_free: start,
            outstanding: 0,
            pending_regs: 0,
            finish: start,
            started: start,
            state: PeState::Running,
        });
        ka.kcal.0.push(start, pe);
    }
    inbox.restore(Purpose::Launch, launches);

    let loads = inbox.take(Purpose::LoadData);
    for a in &loads {
        let job = ka.host.loads.remove(a.tag as usize);
        qa.oplog.finish(job.oplog, now);
        qa.queues.pe_events.push(PeEvent::Resolve {
            pe: job.pe,
            reg: job.reg,
            at: now,
            data: None,
        });
    }
    inbox.restore(Purpose::LoadData, loads);

    let stores = inbox.take(Purpose::StoreData);
    for a in &stores {
        let job = ka.host.stores.remove(a.tag as usize);
        let done = qa
            .ports
            .access(job.dst.space, job.dst.instance, now, job.bytes);
        qa.oplog.finish(job.oplog, done);
        qa.queues.pe_events.push(PeEvent::Complete {
            pe: job.pe,
            at: done,
        });
    }
    inbox.restore(Purpose::StoreData, stores);
}

/// Queues an install message per PE from the host; the table is applied when
/// the message arrives, so installs take simulated time.
pub fn send_installs(world: &mut World, tables: Vec<(u32, Vec<Entry>)>) {
    let now = world.resource::<Clock>().now;
    let entry_bytes = world.resource::<ExecParams>().install_entry_bytes;
    let host_node = world.resource::<Hardware>().host_node;
    for (pe, entries) in tables {
        let dst = world.resource::<Hardware>().pe_nodes[pe as usize];
        let bytes = entries.len().max(1) as u64 * entry_bytes;
        let tag = world
            .resource_mut::<HostQueue>()
            .installs
            .insert((pe, entries)) as u64;
        world.resource_mut::<Outbox>().send(Send {
            src: host_node,
            dst,
            bytes,
            at: now,
            purpose: Purpose::Install,
            tag,
            route: None,
        });
    }
}

/// Queues a launch message per PE from the host.
pub fn send_launches(world: &mut World, programs: Vec<(u32, Arc<Program>)>) {
    let now = world.resource::<Clock>().now;
    let bytes = world.resource::<ExecParams>().launch_bytes;
    let host_node = world.resource::<Hardware>().host_node;
    for (pe, program) in programs {
        let dst = world.resource::<Hardware>().pe_nodes[pe as usize];
        let tag = world
            .resource_mut::<HostQueue>()
            .launches
            .insert((pe, program)) as u64;
        world.resource_mut::<Outbox>().send(Send {
            src: host_node,
            dst,
            bytes,
            at: now,
            purpose: Purpose::Launch,
            tag,
            route: None,
        });
    }
}

/// Why each unfinished PE cannot go on; None when every launched PE is done.
pub fn deadlock_report(world: &mut World) -> Option<String> {
    let now = world.resource::<Clock>().now;
    let mut stuck: Vec<(u32, PeExec)> = Vec::new();
    let mut q = world.query::<(&crate::hierarchy::Pe, &PeExec)>();
    let hw = world.resource::<Hardware>();
    for (p, ex) in q.iter(world) {
        if ex.state == PeState::Running {
            stuck.push((hw.pe_index(p.sip, p.cube, p.index), ex.clone()));
        }
    }
    if stuck.is_empty() {
        return None;
    }
    stuck.sort_by_key(|s| s.0);
    let queues = world.resource::<crate::ipcq::Queues>();
    let name = |pe: u32| {
        let (s, c, p) = hw.coords(pe);
        format!("sip{s}.cube{c}.pe{p}")
    };
    let mut out = format!(
        "deadlock at tick {now}: nothing is due and {} PE(s) have not finished\n",
        stuck.len()
    );
    for (pe, ex) in &stuck {
        let program = &ex.program;
        let at = match program.ops.get(ex.pc as usize) {
            Some(op) => format!("op {} of {} ({})", ex.pc, program.ops.len(), op.name()),
            None => format!(
                "the end of its program ({} async op(s) and {} register(s) outstanding)",
                ex.outstanding, ex.pending_regs
            ),
        };
        out.push_str(&format!("  {}: blocked at {at}\n", name(*pe)));
        for qu in &queues.list {
            let state = format!(
                "sender credits {}/{}, {} chunk(s) in flight, {} full slot(s), {} credit(s) in flight",
                qu.credits, qu.n_slots, qu.chunks_in_flight, qu.full, qu.credits_in_flight
            );
            let from = qu.sender_pe.map_or("no installed sender".to_string(), name);
            if qu.recvs.iter().any(|j| j.pe == *pe) {
                out.push_str(&format!(
                    "    waiting in recv on {} (queue of {} from {from}): {state}\n",
                    qu.dir.name(),
                    name(qu.receiver)
                ));
            }
            if qu.sends.iter().any(|j| j.pe == *pe) {
                let to = if qu.installed {
                    ""
                } else {
                    " (receiver not installed)"
                };
                out.push_str(&format!(
                    "    waiting in send to {} {}{to}: {state}\n",
                    name(qu.receiver),
                    qu.dir.name()
                ));
            }
        }
    }
    Some(out)
}
