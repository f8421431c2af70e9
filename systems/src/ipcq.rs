//! IPCQ: inter-PE queues with credit flow control (docs/model.md §IPCQ).
//!
//! A queue is named by its receiving end (receiver PE, direction). Its
//! `n_slots` slots of `slot_size` bytes live in the receiver's buffer memory,
//! each with a [`SlotState`]. A send becomes chunks of at most
//! `slot_size` bytes; each chunk takes a credit (the sender starts with
//! `n_slots`), is read from the sender's TCM, travels as a [`Purpose::Chunk`]
//! message, and is written into the next slot (slot Full). A recv consumes
//! full slots in order, reading each from the buffer memory; each freed slot
//! sends a [`Purpose::Credit`] message back, which returns the credit.
//!
//! A slot's state lives in its queue's `slots` alone (the queue keeps no
//! count of full or in-flight slots). Invariant per queue, at every tick:
//! `credits + slots InFlight + slots Full + credits_in_flight = n_slots`.
//!
//! Layout: what a PE reads to issue a send or recv, its [`NeighborTables`],
//! is a component on the PE entity. The queues are a dense table, the
//! [`Queues`] resource indexed by [`QueueId`] (the tag every chunk, credit
//! and slot read carries), with each queue's slots inline: a queue is
//! touched at every step of every chunk (credit, slot write, slot read,
//! credit return), by whichever system holds the message, never by a PE's
//! own system. Slots used to be entities read through a `Query` per step;
//! inline slots cut the 4096-PE kernel ring bench (`kernbench bench
//! --no-build --no-traffic --rounds 2000`) from 4.69 to 3.96 s of CPU
//! (median of 3, side by side), so queues are not entities either.

use crate::exec::{PeEvent, PeEvents};
use crate::ids::PeIdx;
use crate::memory::MemPorts;
use crate::network::{Inbox, LinkTable, NewMessage, NodeId, Outbox, Purpose, RouteId, Routes};
use crate::program::{QDir, Reg, Space};
use crate::time::{Calendar, Clock, Tick};
use bevy_ecs::prelude::*;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::Arc;

/// The neighbour tables of one queue scope (one communicator), as installed:
/// (global PE index, that PE's entries), one pair per wired PE.
pub type Tables = Vec<(PeIdx, Vec<Entry>)>;

/// One neighbour-table entry of a PE: where direction `dir` leads and the
/// receive buffer of this PE's queue for `dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    pub dir: QDir,
    /// The direction under which the peer knows this PE (normally `dir.opposite()`).
    pub peer_dir: QDir,
    /// Global index of the peer PE.
    pub peer: PeIdx,
    /// Memory holding this PE's receive slots for `dir`.
    pub buffer: Space,
    /// Offset of slot 0 in the buffer memory.
    pub base: u64,
    pub n_slots: u32,
    pub slot_size: u64,
}

/// A communicator's id. Each communicator installs its own neighbour
/// tables and gets its own queues, so one PE can belong to several
/// communicators (a data-parallel and a tensor-parallel group) without their
/// traffic ever mixing; a kernel launched under a scope sends and receives on
/// that scope's queues only.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Scope(pub u32);

impl Scope {
    /// The scope of wiring installed without a communicator.
    pub const DEFAULT: Scope = Scope(0);
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A PE's neighbour tables, one per communicator scope it belongs to. The
/// first is held inline: a PE's step reads it at every wake, and most PEs
/// belong to one communicator.
#[derive(Component, Debug, Clone, Default, PartialEq, Eq)]
pub struct NeighborTables(pub SmallVec<[(Scope, NeighborTable); 1]>);

impl NeighborTables {
    /// The table this PE installed for `scope`.
    pub fn get(&self, scope: Scope) -> Option<&NeighborTable> {
        self.0.iter().find(|(s, _)| *s == scope).map(|(_, t)| t)
    }
}

/// A PE's installed neighbour table of one scope: each entry with the
/// queues it resolves to, side by side so a send or recv reads one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborTable {
    pub neighbors: Vec<Neighbor>,
}

/// One entry of a neighbour table and its queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbor {
    pub entry: Entry,
    /// The queue this PE sends into (the peer's, for `peer_dir`).
    pub send_q: QueueId,
    /// The queue this PE receives from (its own, for `dir`).
    pub recv_q: QueueId,
}

impl NeighborTable {
    /// The entry for `dir` and the queue a send on `dir` goes into.
    pub fn send(&self, dir: QDir) -> Option<(&Entry, QueueId)> {
        let n = self.neighbors.iter().find(|n| n.entry.dir == dir)?;
        Some((&n.entry, n.send_q))
    }

    /// The queue a recv on `dir` reads.
    pub fn recv(&self, dir: QDir) -> Option<QueueId> {
        let n = self.neighbors.iter().find(|n| n.entry.dir == dir)?;
        Some(n.recv_q)
    }
}

impl Queue {
    /// Its slots in flight and full, counted from the slot states.
    pub fn slot_counts(&self) -> (u32, u32) {
        let mut counts = (0, 0);
        for s in &self.slots {
            match s.state {
                SlotState::InFlight => counts.0 += 1,
                SlotState::Full => counts.1 += 1,
                SlotState::Free => {}
            }
        }
        counts
    }
}

/// Index of a queue in [`Queues::list`]; the tag of its chunk, credit and
/// slot-read messages.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u32);

impl QueueId {
    /// Its position in [`Queues::list`].
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The queue a chunk, credit or slot-read message is for.
    fn of(a: &crate::network::Arrival) -> QueueId {
        QueueId(a.tag as u32)
    }
}

/// State of one receive slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    Free,
    /// A chunk holds its credit and is on its way (or being written).
    InFlight,
    /// Written, waiting for a recv.
    Full,
}

/// A receive slot of a queue (`Queue::slots[i]` is slot `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub state: SlotState,
    /// Bytes of the chunk it holds (Full) or will hold (InFlight).
    pub bytes: u64,
}

/// A send in progress on a queue.
#[derive(Debug, Clone)]
pub struct SendJob {
    pub pe: PeIdx,
    pub bytes: u64,
    pub sent: u64,
    /// The dtype of the register sent: chunks hold whole elements.
    pub dtype: crate::dtype::DType,
    pub data: Option<Arc<Vec<f32>>>,
    pub trace: Option<u32>,
}

/// A recv in progress on a queue.
#[derive(Debug, Clone)]
pub struct RecvJob {
    pub pe: PeIdx,
    pub reg: Reg,
    pub bytes: u64,
    pub got: u64,
    /// Slot reads still travelling from an SRAM/HBM buffer to the PE.
    pub landing: u32,
    pub ready: Tick,
    pub data: Vec<f32>,
    pub trace: Option<u32>,
}

/// One queue: the receive side's buffer and the sender's credits.
#[derive(Debug, Clone)]
pub struct Queue {
    pub receiver: PeIdx,
    pub scope: Scope,
    pub dir: QDir,
    /// Set when the receiver's table is installed.
    pub installed: bool,
    /// The PE that sends into this queue (the receiver's entry's peer).
    pub sender_pe: Option<PeIdx>,
    pub buffer: Space,
    pub buffer_instance: u32,
    pub buffer_node: NodeId,
    pub base: u64,
    pub n_slots: u32,
    pub slot_size: u64,
    /// Slot `i`'s state, in ring order.
    pub slots: Vec<Slot>,
    /// Credits held by the sender.
    pub credits: u32,
    /// Credits of freed slots on their way back to the sender.
    pub credits_in_flight: u32,
    /// Chunks that took a credit / were written / were consumed, ever.
    pub reserved: u64,
    pub filled: u64,
    pub consumed: u64,
    pub sends: VecDeque<SendJob>,
    pub recvs: VecDeque<RecvJob>,
    /// Functional mode: chunk values in order, from credit use to consumption.
    pub payloads: VecDeque<Vec<f32>>,
    /// Send and recv ops issued on this queue, ever: the k-th send and the
    /// k-th recv move the same data (a trace draws them as one flow).
    pub send_ops: u32,
    pub recv_ops: u32,
    /// Routes of this queue's chunks, credits and slot reads, once looked up.
    pub routes: [Option<RouteId>; 3],
}

/// All queues, by (receiver PE, scope, direction).
#[derive(Resource, Debug, Default)]
pub struct Queues {
    pub list: Vec<Queue>,
    index: FxHashMap<(PeIdx, Scope, QDir), QueueId>,
    /// Slots freed this tick whose credits leave at the given tick.
    pub credit_due: Vec<(QueueId, Tick)>,
    /// Queues just installed: waiting sends may proceed.
    pub kick: Vec<QueueId>,
}

/// Slot writes that complete after the chunk arrived (non-ideal buffer memory).
#[derive(Resource, Debug, Default)]
pub struct DmaCalendar(pub Calendar<(QueueId, u32)>);

/// Engine-side facts the queue logic needs about the machine.
#[derive(Resource, Debug, Clone, Default)]
pub struct QueueParams {
    pub credit_bytes: u64,
}

/// Everything queue progress touches, bundled so every stage can drive it.
pub struct QueueCtx<'a> {
    pub now: Tick,
    pub queues: &'a mut Queues,
    pub pe_events: &'a mut Vec<PeEvent>,
    pub ports: &'a mut MemPorts,
    pub outbox: &'a mut Outbox,
    pub trace: &'a mut crate::trace::Trace,
    pub pe_nodes: &'a [NodeId],
    pub routes: &'a mut Routes,
    pub links: &'a LinkTable,
}

/// Which cached route of a queue.
#[derive(Debug, Clone, Copy)]
enum Leg {
    Chunk = 0,
    Credit = 1,
    SlotData = 2,
}

impl QueueCtx<'_> {
    /// Sends a message of one of a queue's legs, reusing the queue's cached route.
    fn send(
        &mut self,
        q: QueueId,
        leg: Leg,
        src: NodeId,
        dst: NodeId,
        bytes: u64,
        at: Tick,
        purpose: Purpose,
    ) {
        let cached = &mut self.queues.list[q.index()].routes[leg as usize];
        if cached.is_none() {
            *cached = self.routes.get(self.links, src, dst).ok();
        }
        let route = *cached;
        self.outbox.send(NewMessage {
            src,
            dst,
            bytes,
            at,
            purpose,
            tag: u64::from(q.0),
            route,
        });
    }
}

impl Queues {
    /// The queue (receiver, scope, dir), created empty (not installed) on first use.
    pub fn queue(&mut self, receiver: PeIdx, scope: Scope, dir: QDir) -> QueueId {
        if let Some(&q) = self.index.get(&(receiver, scope, dir)) {
            return q;
        }
        let q = QueueId(self.list.len() as u32);
        self.list.push(Queue {
            receiver,
            scope,
            dir,
            installed: false,
            sender_pe: None,
            buffer: Space::Tcm,
            buffer_instance: 0,
            buffer_node: NodeId::default(),
            base: 0,
            n_slots: 0,
            slot_size: 0,
            slots: Vec::new(),
            credits: 0,
            credits_in_flight: 0,
            reserved: 0,
            filled: 0,
            consumed: 0,
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
            payloads: VecDeque::new(),
            send_ops: 0,
            recv_ops: 0,
            routes: [None; 3],
        });
        self.index.insert((receiver, scope, dir), q);
        q
    }
}

/// Issues chunks of the queue's front sends while credits last.
pub fn pump_send(ctx: &mut QueueCtx, q: QueueId) {
    loop {
        let qu = &mut ctx.queues.list[q.index()];
        if qu.credits == 0 {
            return;
        }
        let Some(job) = qu.sends.front_mut() else {
            return;
        };
        // A chunk holds whole elements: an f32 send on slots of 4k + 2 bytes
        // fills 4k of each.
        let eb = job.dtype.bytes();
        let bytes = (job.bytes - job.sent).min(qu.slot_size / eb * eb);
        qu.credits -= 1;
        let slot = (qu.reserved % qu.n_slots as u64) as usize;
        qu.slots[slot] = Slot {
            state: SlotState::InFlight,
            bytes,
        };
        qu.reserved += 1;
        if let Some(data) = &job.data {
            let from = (job.sent / eb) as usize;
            qu.payloads
                .push_back(data[from..from + (bytes / eb) as usize].to_vec());
        }
        job.sent += bytes;
        let (pe, done) = (job.pe, job.sent == job.bytes);
        let (src, dst) = (ctx.pe_nodes[pe.index()], qu.buffer_node);
        let read = ctx.ports.access(Space::Tcm, pe.0, ctx.now, bytes);
        ctx.send(q, Leg::Chunk, src, dst, bytes, read, Purpose::Chunk);
        if done {
            let job = ctx.queues.list[q.index()]
                .sends
                .pop_front()
                .expect("front job");
            ctx.trace.finish(job.trace, read);
            ctx.pe_events.push(PeEvent::Complete { pe, at: read });
        }
    }
}

/// Consumes full slots in order for the queued recvs, front first; a recv
/// that has all its bytes (and, for SRAM/HBM buffers, has them landed)
/// resolves and the next one continues.
pub fn pump_recv(ctx: &mut QueueCtx, q: QueueId) -> Result<(), String> {
    loop {
        consume(ctx, q)?;
        if !finish_recv(ctx, q) {
            return Ok(());
        }
    }
}

/// Reads full slots into the front recv until it has its bytes or none is full.
fn consume(ctx: &mut QueueCtx, q: QueueId) -> Result<(), String> {
    loop {
        let qu = &mut ctx.queues.list[q.index()];
        let Some(job) = qu.recvs.front_mut() else {
            return Ok(());
        };
        if job.got == job.bytes {
            return Ok(());
        }
        let s = &mut qu.slots[(qu.consumed % qu.n_slots as u64) as usize];
        if s.state != SlotState::Full {
            return Ok(()); // slots fill in order: the next one is not written yet
        }
        qu.consumed += 1;
        let bytes = s.bytes;
        s.state = SlotState::Free;
        let read = ctx
            .ports
            .access(qu.buffer, qu.buffer_instance, ctx.now, bytes);
        qu.credits_in_flight += 1;
        ctx.queues.credit_due.push((q, read));
        if let Some(p) = qu.payloads.pop_front() {
            job.data.extend_from_slice(&p);
        }
        job.got += bytes;
        if job.got > job.bytes {
            return Err(format!(
                "recv of {} bytes on {} at PE {} got chunks totalling {} bytes: sends and recvs on a queue must match in size",
                job.bytes,
                qu.dir.name(),
                job.pe,
                job.got
            ));
        }
        if qu.buffer == Space::Tcm {
            job.ready = job.ready.max(read);
        } else {
            job.landing += 1;
            let (src, dst) = (qu.buffer_node, ctx.pe_nodes[job.pe.index()]);
            ctx.send(q, Leg::SlotData, src, dst, bytes, read, Purpose::SlotData);
        }
    }
}

/// Resolves the front recv once all its bytes are read and landed; true if it did.
fn finish_recv(ctx: &mut QueueCtx, q: QueueId) -> bool {
    let qu = &mut ctx.queues.list[q.index()];
    let done = qu
        .recvs
        .front()
        .is_some_and(|j| j.got == j.bytes && j.landing == 0);
    if done {
        let job = qu.recvs.pop_front().expect("front job");
        ctx.trace.finish(job.trace, job.ready);
        ctx.pe_events.push(PeEvent::Resolve {
            pe: job.pe,
            reg: job.reg,
            at: job.ready,
            data: (!job.data.is_empty() || job.bytes == 0).then_some(job.data),
        });
    }
    done
}

/// Marks a written slot Full and lets a waiting recv consume it.
pub fn slot_filled(ctx: &mut QueueCtx, q: QueueId, slot: u32) -> Result<(), String> {
    ctx.queues.list[q.index()].slots[slot as usize].state = SlotState::Full;
    pump_recv(ctx, q)
}

/// The queue-facing resources of a system, as one parameter.
#[derive(bevy_ecs::system::SystemParam)]
pub struct QueueAccess<'w> {
    pub clock: Res<'w, Clock>,
    pub queues: ResMut<'w, Queues>,
    pub pe_events: ResMut<'w, PeEvents>,
    pub ports: ResMut<'w, MemPorts>,
    pub outbox: ResMut<'w, Outbox>,
    pub trace: ResMut<'w, crate::trace::Trace>,
    pub hw: Res<'w, crate::hierarchy::Hardware>,
    pub errors: ResMut<'w, crate::RunErrors>,
    pub routes: ResMut<'w, Routes>,
    pub links: Res<'w, LinkTable>,
}

impl<'w> QueueAccess<'w> {
    pub fn ctx(&mut self) -> (QueueCtx<'_>, &mut crate::RunErrors) {
        (
            QueueCtx {
                now: self.clock.now,
                queues: &mut self.queues,
                pe_events: &mut self.pe_events.0,
                ports: &mut self.ports,
                outbox: &mut self.outbox,
                trace: &mut self.trace,
                pe_nodes: &self.hw.pe_nodes,
                routes: &mut self.routes,
                links: &self.links,
            },
            &mut self.errors,
        )
    }
}

/// Delivery of chunks: each is written into its slot through the buffer
/// memory's port; the slot turns Full when the write completes.
pub fn deliver_chunks(inbox: &mut Inbox, dma: &mut DmaCalendar, qa: &mut QueueAccess) {
    let arrived = inbox.take(Purpose::Chunk);
    if arrived.is_empty() {
        return inbox.restore(Purpose::Chunk, arrived);
    }
    let (mut ctx, errors) = qa.ctx();
    for a in &arrived {
        let q = QueueId::of(a);
        let qu = &mut ctx.queues.list[q.index()];
        let slot = (qu.filled % qu.n_slots as u64) as u32;
        qu.filled += 1;
        let written = ctx
            .ports
            .access(qu.buffer, qu.buffer_instance, ctx.now, a.bytes);
        if written == ctx.now {
            if let Err(e) = slot_filled(&mut ctx, q, slot) {
                errors.report(e);
            }
        } else {
            dma.0.push(written, (q, slot));
        }
    }
    inbox.restore(Purpose::Chunk, arrived);
}

/// Delivery of slot reads from SRAM/HBM buffers: the front recv's data lands.
pub fn deliver_slot_data(inbox: &mut Inbox, qa: &mut QueueAccess) {
    let arrived = inbox.take(Purpose::SlotData);
    let (mut ctx, errors) = qa.ctx();
    for a in &arrived {
        let q = QueueId::of(a);
        let job = ctx.queues.list[q.index()]
            .recvs
            .front_mut()
            .expect("a recv awaits its data");
        job.landing -= 1;
        job.ready = job.ready.max(a.at);
        // The finished recv may leave full slots for the next one.
        if let Err(e) = pump_recv(&mut ctx, q) {
            errors.report(e);
        }
    }
    inbox.restore(Purpose::SlotData, arrived);
}

/// The `dma` stage: slot writes that complete now make their slots Full.
pub fn dma(mut dma: ResMut<DmaCalendar>, mut qa: QueueAccess) {
    let now = qa.clock.now;
    let Some(mut due) = dma.0.take_due(now) else {
        return;
    };
    due.sort_unstable();
    let (mut ctx, errors) = qa.ctx();
    for &(q, slot) in &due {
        if let Err(e) = slot_filled(&mut ctx, q, slot) {
            errors.report(e);
        }
    }
    dma.0.recycle(due);
}

/// The `credit_return` stage: freed slots send their credits back to the
/// sender; arriving credits return to the sender and release waiting chunks.
pub fn credit_return(mut inbox: ResMut<Inbox>, params: Res<QueueParams>, mut qa: QueueAccess) {
    let (mut ctx, _) = qa.ctx();
    for q in std::mem::take(&mut ctx.queues.kick) {
        pump_send(&mut ctx, q);
    }
    let mut due = std::mem::take(&mut ctx.queues.credit_due);
    for (q, at) in due.drain(..) {
        let qu = &ctx.queues.list[q.index()];
        let sender = qu.sender_pe.expect("a consumed slot had a sender");
        let (src, dst) = (
            ctx.pe_nodes[qu.receiver.index()],
            ctx.pe_nodes[sender.index()],
        );
        ctx.send(
            q,
            Leg::Credit,
            src,
            dst,
            params.credit_bytes,
            at,
            Purpose::Credit,
        );
    }
    ctx.queues.credit_due = due; // empty: its allocation serves the next tick
    let arrived = inbox.take(Purpose::Credit);
    for a in &arrived {
        let q = QueueId::of(a);
        let qu = &mut ctx.queues.list[q.index()];
        qu.credits += 1;
        qu.credits_in_flight -= 1;
        pump_send(&mut ctx, q);
    }
    inbox.restore(Purpose::Credit, arrived);
}

/// The IPCQ module: queues, their parameters and the slot-write calendar;
/// the DMA and credit-return stages; its calendar.
pub struct IpcqPlugin;

impl crate::plugin::Plugin for IpcqPlugin {
    fn build(&self, world: &mut World, schedule: &mut Schedule) {
        world.init_resource::<Queues>();
        world.init_resource::<QueueParams>();
        world.init_resource::<DmaCalendar>();
        schedule.add_systems(dma.run_if(dma_due).in_set(crate::Stage::Dma));
        schedule.add_systems(
            credit_return
                .run_if(credit_work)
                .in_set(crate::Stage::CreditReturn),
        );
        crate::plugin::register_calendar(world, |w, now| {
            let q = w.resource::<Queues>();
            if !q.credit_due.is_empty() || !q.kick.is_empty() {
                return Some(now);
            }
            w.resource::<DmaCalendar>().0.next_due()
        });
    }
}

fn dma_due(clock: Res<Clock>, cal: Res<DmaCalendar>) -> bool {
    crate::plugin::due(cal.0.next_due(), clock.now)
}

fn credit_work(inbox: Res<Inbox>, q: Res<Queues>) -> bool {
    inbox.has(Purpose::Credit) || !q.credit_due.is_empty() || !q.kick.is_empty()
}
