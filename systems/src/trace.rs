//! What a run did, for traces: one record per issued op, one span
//! per packet on a link, one arrival per message, handed to a [`TraceSink`]
//! as they complete. Nothing is kept for the whole run: a PE's records wait
//! only until every earlier op of that PE has finished, so a sink sees each
//! PE's ops in start order (what track packing needs) and memory stays at
//! the ops and messages in flight.
//!
//! Layout: one resource, [`Trace`]; records wait in a slab keyed by the
//! handle their op got, because the op's end is reported by whichever
//! system finishes it (a queue, a delivery), not by the PE's own system.

use crate::ids::{Arrival, LinkId, MsgId, PeIdx};
use crate::time::{PENDING, Tick};
use bevy_ecs::prelude::*;
use std::any::Any;
use std::collections::VecDeque;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    pub op: &'static str,
    pub sip: u32,
    pub cube: u32,
    pub pe: u32,
    pub start: Tick,
    pub end: Tick,
    pub bytes: u64,
    pub params: String,
    /// Completes after issue (send, recv, remote load or store): the PE goes
    /// on issuing meanwhile.
    pub asynchronous: bool,
    /// For a send and a recv: the k-th send into a queue and the k-th recv
    /// from it share this id (queue index in the high 32 bits, k in the low).
    pub flow: Option<u64>,
}

/// One packet's serialisation on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketSpan {
    pub link: LinkId,
    pub start: Tick,
    pub end: Tick,
    pub msg: MsgId,
    pub bytes: u64,
}

/// (sip, cube, pe) of a global PE index: what a trace record names a PE by
/// (the hardware index implements it, so `trace` needs no model module).
pub trait PeCoords {
    fn coords(&self, pe: PeIdx) -> (u32, u32, u32);
}

/// Where trace events go (a trace file writer, or memory in tests).
pub trait TraceSink: Send + Sync + 'static {
    /// An op that has finished; per PE in start order.
    fn op(&mut self, r: &OpRecord);
    /// A packet serialised on a link; per link in time order.
    fn packet(&mut self, span: &PacketSpan);
    /// A message whose last packet has arrived.
    fn message(&mut self, a: &Arrival);
    /// The sink as `Any`, so its owner can read it or take it back as its
    /// own type.
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// Op records kept in memory (tests and small runs).
#[derive(Debug, Clone, Default)]
pub struct OpRecords(pub Vec<OpRecord>);

impl TraceSink for OpRecords {
    fn op(&mut self, r: &OpRecord) {
        self.0.push(r.clone());
    }
    fn packet(&mut self, _: &PacketSpan) {}
    fn message(&mut self, _: &Arrival) {}
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The trace of a run: off unless a sink is set.
#[derive(Resource, Default)]
pub struct Trace {
    sink: Option<Box<dyn TraceSink>>,
    /// Records not yet handed to the sink, with their PE.
    waiting: slab::Slab<(PeIdx, OpRecord)>,
    /// Per PE, its waiting records in issue (= start) order.
    order: Vec<VecDeque<u32>>,
}

impl Trace {
    /// Sends every later event to `sink`.
    pub fn set_sink(&mut self, sink: Box<dyn TraceSink>) {
        self.sink = Some(sink);
    }

    /// Stops tracing and gives the sink back (after the run, nothing waits).
    pub fn take_sink(&mut self) -> Option<Box<dyn TraceSink>> {
        self.waiting.clear();
        self.order.clear();
        self.sink.take()
    }

    /// The sink, if it is a `T`.
    pub fn sink<T: TraceSink>(&self) -> Option<&T> {
        self.sink.as_ref()?.as_any().downcast_ref()
    }

    pub fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Records an op issued on PE `pe` at `start`; `end` is [`PENDING`] for
    /// an asynchronous op, whose handle [`Trace::finish`] then takes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn op(
        &mut self,
        hw: &impl PeCoords,
        pe: PeIdx,
        op: &'static str,
        start: Tick,
        end: Tick,
        bytes: u64,
        flow: Option<u64>,
        params: impl FnOnce() -> String,
    ) -> Option<u32> {
        let sink = self.sink.as_mut()?;
        let (sip, cube, local) = hw.coords(pe);
        let r = OpRecord {
            op,
            sip,
            cube,
            pe: local,
            start,
            end,
            bytes,
            params: params(),
            asynchronous: end == PENDING,
            flow,
        };
        if self.order.len() <= pe.index() {
            self.order.resize_with(pe.index() + 1, VecDeque::new);
        }
        let order = &mut self.order[pe.index()];
        if end != PENDING && order.is_empty() {
            sink.op(&r);
            return None;
        }
        let slot = self.waiting.insert((pe, r)) as u32;
        order.push_back(slot);
        Some(slot)
    }

    /// Sets the end of an asynchronous op and hands its PE's finished
    /// records, oldest first, to the sink.
    pub(crate) fn finish(&mut self, handle: Option<u32>, end: Tick) {
        let (Some(slot), Some(sink)) = (handle, self.sink.as_mut()) else {
            return;
        };
        // A handle from before the sink was taken has nothing waiting.
        let Some((pe, r)) = self.waiting.get_mut(slot as usize) else {
            return;
        };
        r.end = end;
        let order = &mut self.order[pe.index()];
        while let Some(&s) = order.front() {
            if self.waiting[s as usize].1.end == PENDING {
                break;
            }
            order.pop_front();
            sink.op(&self.waiting.remove(s as usize).1);
        }
    }

    /// Records a packet's span on a link.
    pub(crate) fn packet(&mut self, span: PacketSpan) {
        if let Some(s) = self.sink.as_mut() {
            s.packet(&span);
        }
    }

    /// Records a delivered message.
    pub(crate) fn message(&mut self, a: &Arrival) {
        if let Some(s) = self.sink.as_mut() {
            s.message(a);
        }
    }
}

/// The trace module: off until a sink is set.
pub struct TracePlugin;

impl crate::plugin::Plugin for TracePlugin {
    fn build(&self, world: &mut World, _: &mut Schedule) {
        world.init_resource::<Trace>();
    }
}
