//! The encoding of a world's state relative to now ([`Snapshot`]), the
//! periods two snapshots allow to skip ([`Plan`]), and the skip ([`apply`]).

use super::Queries;
use crate::RunErrors;
use crate::exec::{HostQueue, KernelCalendar, OpsIssued, PeEvent, PeEvents, PeExec, PeState};
use crate::hierarchy::Hardware;
use crate::ids::{MsgId, PeIdx};
use crate::ipcq::{DmaCalendar, Queue, Queues};
use crate::memory::{DataMode, MemPorts};
use crate::network::flow::FlowLinks;
use crate::network::{Inbox, LinkTable, NetCounters, Outbox};
use crate::program::{Op, Place};
use crate::schedule::{RunLimits, RunStats};
use crate::time::{Clock, PENDING, Tick};
use crate::trace::Trace;
use crate::traffic::TrafficState;
use bevy_ecs::prelude::*;

/// A state encoded as words: ticks relative to `now`, message ids relative
/// to the next one to be sent, floats by their bits.
pub(crate) struct Sig {
    now: Tick,
    msgs: MsgId,
    pub(crate) words: Vec<u64>,
}

impl Sig {
    pub(crate) fn word(&mut self, w: u64) {
        self.words.push(w);
    }

    /// A tick at which something happens, exactly.
    pub(crate) fn at(&mut self, t: Tick) {
        self.words.push(if t == PENDING {
            u64::MAX
        } else {
            t.wrapping_sub(self.now)
        });
    }

    /// A tick at which something happened, or 0 for one that has not yet.
    pub(crate) fn at_if_set(&mut self, t: Tick) {
        if t == 0 {
            self.word(u64::MAX - 1);
        } else {
            self.at(t);
        }
    }

    /// A tick from which something is free or ready: any past one is now.
    pub(crate) fn from(&mut self, t: Tick) {
        self.at(t.max(self.now));
    }

    pub(crate) fn float(&mut self, x: f64) {
        self.words.push(x.to_bits());
    }

    pub(crate) fn msg(&mut self, id: MsgId) {
        self.words.push(id.0.wrapping_sub(self.msgs.0));
    }
}

/// What a world looked like at the end of a tick in which the pacer began
/// an iteration.
#[derive(Debug)]
pub(crate) struct Snapshot {
    now: Tick,
    next_msg: u64,
    pub(crate) words: Vec<u64>,
    /// A hash of `words`, compared first.
    hash: u64,
    counters: Vec<u64>,
    /// PEs in a loop: (PE, iteration, iteration count).
    loops: Vec<(PeIdx, u32, u32)>,
    /// Queues with a backlog of sends not yet begun, in queue order.
    backlogs: Vec<Backlog>,
}

impl Snapshot {
    /// Words it holds: the encoded state and the counters.
    pub(crate) fn held_words(&self) -> usize {
        self.words.len() + self.counters.len()
    }

    /// Itself without the spare capacity its vectors grew while encoding,
    /// to be kept in the history.
    pub(crate) fn kept(mut self) -> Snapshot {
        self.words.shrink_to_fit();
        self.counters.shrink_to_fit();
        self
    }

    /// The world's state, or None when the tick left work that the
    /// encoding does not cover (values, traces, traffic, host messages,
    /// work between stages).
    pub(crate) fn take(world: &mut World, q: &mut Queries) -> Option<Snapshot> {
        if !quiet(world) {
            return None;
        }
        let now = world.resource::<Clock>().now;
        let next_msg = world.resource::<Outbox>().sent();
        let mut sig = Sig {
            now,
            msgs: MsgId(next_msg),
            words: Vec::new(),
        };
        for (t, pe) in world.resource::<KernelCalendar>().0.iter() {
            sig.at(t);
            sig.word(pe.0.into());
        }
        sig.word(u64::MAX);
        for (t, (q, slot)) in world.resource::<DmaCalendar>().0.iter() {
            sig.at(t);
            sig.word(q.0.into());
            sig.word((*slot).into());
        }
        sig.word(u64::MAX);
        pe_events(&world.resource::<PeEvents>().0, &mut sig);
        let backlogs = backlogs(world.resource::<Queues>());
        let loops = execs(world, &mut q.execs, &backlogs, &mut sig);
        queues(world.resource::<Queues>(), &backlogs, &mut sig);
        world.resource::<MemPorts>().steady_words(&mut sig);
        world.resource::<LinkTable>().steady_words(&mut sig);
        crate::network::steady_words(world, &mut q.msgs, &mut sig);
        let run = world.resource::<RunStats>();
        sig.word(run.peak_in_flight);
        sig.at(run.last_delivery);
        let mut counters = Vec::new();
        visit_counters(world, &mut |c| counters.push(*c));
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = rustc_hash::FxHasher::default();
            sig.words.hash(&mut h);
            h.finish()
        };
        Some(Snapshot {
            now,
            next_msg,
            hash,
            words: sig.words,
            counters,
            loops,
            backlogs,
        })
    }
}

impl Snapshot {
    /// Whether both encode the same state (relative to their own ticks).
    pub(crate) fn same_state(&self, other: &Snapshot) -> bool {
        self.hash == other.hash && self.words == other.words
    }
}

/// Whether the end of this tick holds only state the encoding covers.
fn quiet(w: &World) -> bool {
    let q = w.resource::<Queues>();
    *w.resource::<DataMode>() == DataMode::TimingOnly
        && !w.resource::<Trace>().enabled()
        && w.resource::<TrafficState>().source.is_none()
        && w.resource::<RunErrors>().first.is_none()
        && w.resource::<HostQueue>().host_idle()
        && w.resource::<Inbox>().is_empty()
        && w.resource::<Outbox>().is_empty()
        && q.credit_due.is_empty()
        && q.kick.is_empty()
        && w.resource::<FlowLinks>().settled()
}

/// Results waiting for the next schedule run (at or before their tick).
fn pe_events(events: &[PeEvent], sig: &mut Sig) {
    sig.word(events.len() as u64);
    for ev in events {
        match ev {
            PeEvent::Resolve { pe, reg, at, data } => {
                for w in [0, pe.0.into(), (*reg).into(), u64::from(data.is_some())] {
                    sig.word(w);
                }
                sig.at(*at);
            }
            PeEvent::Complete { pe, at } => {
                for w in [1, pe.0.into()] {
                    sig.word(w);
                }
                sig.at(*at);
            }
        }
    }
}

/// Every launched PE's execution state, in PE order; the PEs in a loop.
fn execs(
    world: &World,
    query: &mut QueryState<&'static PeExec>,
    backlogs: &[Backlog],
    sig: &mut Sig,
) -> Vec<(PeIdx, u32, u32)> {
    let pes = &world.resource::<Hardware>().pes;
    let mut loops = Vec::new();
    // A PE's sends in backlogs count as outstanding: what they add
    // changes with the backlogs' lengths and is left out.
    let mut ahead = vec![0u64; pes.len()];
    for b in backlogs {
        ahead[b.pe.index()] += b.len;
    }
    for (i, &e) in pes.iter().enumerate() {
        let Ok(ex) = query.get(world, e) else {
            sig.word(0);
            continue;
        };
        if let PeState::Done(_) = ex.state {
            sig.word(1);
            continue;
        }
        sig.word(2);
        exec_words(ex, ahead[i], sig);
        if let Some(f) = ex.frame {
            loops.push((PeIdx(i as u32), f.iter, f.count));
        }
    }
    loops
}

/// One running PE: its program, place in it, registers and units (its
/// outstanding ops less the `ahead` of them waiting in backlogs).
fn exec_words(ex: &PeExec, ahead: u64, sig: &mut Sig) {
    sig.word(std::sync::Arc::as_ptr(&ex.program) as u64);
    sig.word(ex.scope.0.into());
    sig.word(ex.launch.0.into());
    sig.word(ex.pc.into());
    match ex.frame {
        None => sig.word(u64::MAX),
        Some(f) => {
            sig.word(f.start.into());
            sig.word(f.end.into());
            sig.word(f.count.into());
            sig.word(f.rot.into());
            sig.word(f.rot_len.into());
            // Registers trade names in odd iterations.
            sig.word(u64::from(f.rot_len > 0 && f.iter % 2 == 1));
        }
    }
    for r in &ex.regs {
        sig.from(r.ready_at);
        sig.word(r.elems);
        sig.word(r.dtype as u64);
    }
    sig.from(ex.vector_free);
    sig.from(ex.mac_free);
    sig.word(u64::from(ex.outstanding) - ahead);
    sig.word(ex.pending_regs.into());
    sig.at(ex.finish);
    // Launches waiting for this one to finish.
    sig.word(ex.queued.len() as u64);
    for q in &ex.queued {
        sig.word(std::sync::Arc::as_ptr(&q.launch.program) as u64);
        sig.word(q.scope.0.into());
        sig.word(q.id.0.into());
        sig.from(q.ready);
    }
}

/// Every queue's credits, slots and jobs in progress (its ever-counters
/// relative to its chunks reserved).
fn queues(q: &Queues, backlogs: &[Backlog], sig: &mut Sig) {
    let mut backlogs = backlogs.iter().peekable();
    for (i, qu) in q.list.iter().enumerate() {
        sig.word(u64::from(qu.installed));
        sig.word(qu.sender_pe.map_or(u64::MAX, |p| p.0.into()));
        sig.word(qu.credits.into());
        sig.word(qu.credits_in_flight.into());
        for s in &qu.slots {
            sig.word(s.state as u64);
            sig.word(s.bytes);
        }
        let n = u64::from(qu.n_slots.max(1));
        sig.word(qu.reserved % n);
        sig.word(qu.reserved.wrapping_sub(qu.filled));
        sig.word(qu.reserved.wrapping_sub(qu.consumed));
        // A backlog is encoded as one of its sends, not by its length.
        let shown = match backlogs.next_if(|b| b.queue == i) {
            Some(b) => b.ahead_of_it as usize,
            None => qu.sends.len(),
        };
        sig.word(shown as u64);
        for j in qu.sends.iter().take(shown) {
            sig.word(j.pe.0.into());
            sig.word(j.bytes);
            sig.word(j.sent);
            sig.word(j.dtype as u64);
        }
        sig.word(qu.recvs.len() as u64);
        for j in &qu.recvs {
            sig.word(j.pe.0.into());
            sig.word(j.reg.into());
            sig.word(j.bytes);
            sig.word(j.got);
            sig.word(j.landing.into());
            sig.at(j.ready);
        }
    }
}

/// A queue's trailing sends not yet begun, each like the last: a producer
/// running ahead of its stream adds to them faster than the queue drains
/// (or, once it stops, drains them) by the same count every period, and the
/// queue only ever reads its front sends, so their number does not steer
/// the run while they last.
#[derive(Debug, Clone, Copy)]
struct Backlog {
    queue: usize,
    pe: PeIdx,
    /// The backlog's sends left out of the encoding (all but its first).
    len: u64,
    /// The queue's sends in the encoding: those in front, and the first.
    ahead_of_it: u64,
    /// The queue's send ops so far (a wrapping count).
    send_ops: u32,
}

/// How many of the queue's last sends are not begun and alike.
fn untouched_run(qu: &Queue) -> usize {
    let Some(last) = qu.sends.back() else {
        return 0;
    };
    let alike = |j: &&crate::ipcq::SendJob| {
        j.sent == 0
            && j.pe == last.pe
            && j.bytes == last.bytes
            && j.dtype == last.dtype
            && j.data.is_none()
            && j.trace.is_none()
    };
    qu.sends.iter().rev().take_while(alike).count()
}

/// Every queue's backlog of sends (its last ones untouched and alike; all
/// but the first of them hidden from the encoding).
fn backlogs(q: &Queues) -> Vec<Backlog> {
    q.list
        .iter()
        .enumerate()
        .filter_map(|(i, qu)| {
            let run = untouched_run(qu);
            let last = qu.sends.back().filter(|_| run > 0)?;
            Some(Backlog {
                queue: i,
                pe: last.pe,
                len: run as u64 - 1,
                ahead_of_it: (qu.sends.len() - run) as u64 + 1,
                send_ops: qu.send_ops,
            })
        })
        .collect()
}

/// Every counter that grows with the run without steering it: statistics
/// and the counters ids and slot positions are taken from. Visited in one
/// fixed order, to read them or to move them on.
fn visit_counters(world: &mut World, f: &mut impl FnMut(&mut u64)) {
    let mut clock = world.resource_mut::<Clock>();
    f(&mut clock.steps);
    f(&mut clock.schedule_runs);
    f(&mut world.resource_mut::<OpsIssued>().0);
    let mut net = world.resource_mut::<NetCounters>();
    f(&mut net.hops);
    f(&mut net.ideal_hops);
    f(&mut net.delivered);
    world.resource_mut::<Outbox>().steady_counters(f);
    world.resource_mut::<RunStats>().steady_counters(f);
    world.resource_mut::<LinkTable>().steady_counters(f);
    world.resource_mut::<MemPorts>().steady_counters(f);
    for qu in &mut world.resource_mut::<Queues>().list {
        f(&mut qu.reserved);
        f(&mut qu.filled);
        f(&mut qu.consumed);
        let mut ops = [u64::from(qu.send_ops), u64::from(qu.recv_ops)];
        ops.iter_mut().for_each(&mut *f);
        (qu.send_ops, qu.recv_ops) = (ops[0] as u32, ops[1] as u32);
    }
}

/// A skip: `periods` periods of `ticks` ticks, each sending `msgs`
/// messages and moving each looping PE `iters` iterations on.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) ticks: Tick,
    pub(crate) periods: u64,
    msgs: u64,
    iters: Vec<(PeIdx, u32)>,
    /// Backlogs that change length: (queue, its sender, sends added a period).
    backlogs: Vec<(usize, PeIdx, i64)>,
    /// Counter growth over one period (in [`visit_counters`] order).
    growth: Vec<u64>,
}

impl Plan {
    /// The periods that snapshot `now` may skip, given that it encodes the
    /// same state as the earlier `then`; None if none.
    pub(crate) fn between(
        world: &World,
        q: &mut Queries,
        then: &Snapshot,
        now: &Snapshot,
    ) -> Option<Plan> {
        let ticks = now.now.checked_sub(then.now).filter(|&d| d > 0)?;
        let mut periods = u64::MAX;
        if let Some(max) = world.resource::<RunLimits>().max_ticks {
            periods = max.saturating_sub(now.now) / ticks;
        }
        if now.loops.len() != then.loops.len() {
            return None;
        }
        let mut iters = Vec::new();
        for (&(pe, at, count), &(pe0, at0, _)) in now.loops.iter().zip(&then.loops) {
            let step = at.checked_sub(at0).filter(|_| pe == pe0)?;
            if step > 0 {
                periods = periods.min(u64::from(count - 1 - at) / u64::from(step));
                iters.push((pe, at0, step));
            }
        }
        // The ops ahead must have the sizes they had over the period.
        for &(pe, at0, step) in &iters {
            if periods == 0 {
                return None;
            }
            let e = world.resource::<Hardware>().pe_entity(pe);
            let ex = q.execs.get(world, e).ok()?;
            let at = at0 + step;
            let last = u64::from(at) + periods * u64::from(step);
            let same = same_sizes_until(ex, at0, last as u32);
            periods = periods.min(u64::from(same.saturating_sub(at)) / u64::from(step));
        }
        let backlogs = backlog_growth(then, now, &mut periods)?;
        let iters: Vec<(PeIdx, u32)> = iters.into_iter().map(|(pe, _, step)| (pe, step)).collect();
        if iters.is_empty() || periods == 0 {
            return None;
        }
        let growth = now
            .counters
            .iter()
            .zip(&then.counters)
            .map(|(a, b)| a.checked_sub(*b))
            .collect::<Option<Vec<u64>>>()?;
        Some(Plan {
            ticks,
            periods,
            msgs: now.next_msg - then.next_msg,
            iters,
            backlogs,
            growth,
        })
    }
}

/// How each backlog's length changes a period, lowering `periods` to those
/// over which no queue could run out of sends (a queue with sends left
/// behaves the same however many are left behind its front) and no
/// shrinking backlog runs out of hidden sends; None when the period seen
/// may itself have emptied a queue.
fn backlog_growth(
    then: &Snapshot,
    now: &Snapshot,
    periods: &mut u64,
) -> Option<Vec<(usize, PeIdx, i64)>> {
    if then.backlogs.len() != now.backlogs.len() {
        return None;
    }
    let mut growth = Vec::new();
    for (b0, b1) in then.backlogs.iter().zip(&now.backlogs) {
        if b0.queue != b1.queue {
            return None;
        }
        let g = b1.len as i64 - b0.len as i64;
        if g == 0 {
            // The same sends: the same state.
            continue;
        }
        // Sends begun in a period: at most those added, less the growth.
        let begun = i64::from(b1.send_ops.wrapping_sub(b0.send_ops)) - g;
        // Sends left at a period's start must outnumber them.
        let left = |len: u64| (b1.ahead_of_it + len) as i64 - begun - 1;
        if left(b0.len) < 1 || left(b1.len) < 1 {
            return None;
        }
        if g < 0 {
            // The hidden sends may run down to none, no further: past that,
            // the queue's front would reach the backlog's first send.
            let shrink = g.unsigned_abs();
            let runs_out = (left(b1.len) - 1) as u64 / shrink + 1;
            *periods = (*periods).min(runs_out).min(b1.len / shrink);
        }
        growth.push((b1.queue, b1.pe, g));
    }
    Some(growth)
}

/// The last iteration up to `last` through which every op of the PE's loop
/// body has the sizes (and memories) it has in iteration `from`.
fn same_sizes_until(ex: &PeExec, from: u32, last: u32) -> u32 {
    let Some(f) = ex.frame else {
        return from;
    };
    let p = &ex.program;
    let varying = |k: u32| !p.atoms[k as usize].uniform();
    let atoms: Vec<u32> = p.ops[f.start as usize..f.end as usize]
        .iter()
        .filter_map(|op| match *op {
            Op::Load {
                src: Place::Atom(k),
                ..
            }
            | Op::Store {
                dst: Place::Atom(k),
                ..
            }
            | Op::Recv {
                size: Place::Atom(k),
                ..
            } => Some(k).filter(|&k| varying(k)),
            _ => None,
        })
        .collect();
    if atoms.is_empty() {
        return last;
    }
    let shape = |i: u32| {
        atoms.iter().map(move |&k| {
            let (loc, elems) = p.place(Place::Atom(k), &ex.params, i);
            (loc.space, loc.instance, elems)
        })
    };
    let first: Vec<_> = shape(from).collect();
    (from + 1..=last)
        .find(|&i| !shape(i).eq(first.iter().copied()))
        .map_or(last, |i| i - 1)
}

/// Skips `plan.periods` periods: every tick moves `periods · ticks` later,
/// message ids and loop iterations move on, counters grow.
pub(crate) fn apply(world: &mut World, q: &mut Queries, plan: &Plan) {
    let d = plan.periods * plan.ticks;
    let msgs = plan.periods * plan.msgs;
    let mut clock = world.resource_mut::<Clock>();
    clock.now += d;
    clock.last_run += d;
    world.resource_mut::<KernelCalendar>().0.shift(d);
    world.resource_mut::<DmaCalendar>().0.shift(d);
    let mut growth = plan.growth.iter().map(|g| g * plan.periods);
    visit_counters(world, &mut |c| *c += growth.next().unwrap_or(0));
    let pes = world.resource::<Hardware>().pes.clone();
    for &(pe, step) in &plan.iters {
        if let Ok(mut ex) = q.execs_mut.get_mut(world, pes[pe.index()])
            && let Some(f) = &mut ex.frame
        {
            f.iter += step * plan.periods as u32;
        }
    }
    for mut ex in q.execs_mut.iter_mut(world) {
        if ex.state == PeState::Running {
            shift_exec(&mut ex, d);
        }
    }
    for qu in &mut world.resource_mut::<Queues>().list {
        qu.recvs.iter_mut().for_each(|j| later(&mut j.ready, d));
    }
    for &(queue, pe, g) in &plan.backlogs {
        let by = g.unsigned_abs() * plan.periods;
        let mut queues = world.resource_mut::<Queues>();
        let sends = &mut queues.list[queue].sends;
        let back = sends.back().cloned().expect("a backlog has sends");
        if g > 0 {
            sends.extend(std::iter::repeat_n(back, by as usize));
        } else {
            sends.truncate(sends.len() - by as usize);
        }
        if let Ok(mut ex) = q.execs_mut.get_mut(world, pes[pe.index()]) {
            let n = i64::from(ex.outstanding) + g * plan.periods as i64;
            ex.outstanding = n as u32;
        }
    }
    for ev in &mut world.resource_mut::<PeEvents>().0 {
        match ev {
            PeEvent::Resolve { at, .. } | PeEvent::Complete { at, .. } => later(at, d),
        }
    }
    world.resource_mut::<MemPorts>().steady_shift(d);
    world.resource_mut::<LinkTable>().steady_shift(d);
    crate::network::steady_shift(world, &mut q.msgs_mut, d, msgs);
    later(&mut world.resource_mut::<RunStats>().last_delivery, d);
}

/// A running PE's ticks, `d` later (its start stays: it is history).
fn shift_exec(ex: &mut PeExec, d: Tick) {
    for r in &mut ex.regs {
        later(&mut r.ready_at, d);
    }
    later(&mut ex.vector_free, d);
    later(&mut ex.mac_free, d);
    later(&mut ex.finish, d);
    ex.queued.iter_mut().for_each(|q| later(&mut q.ready, d));
}

/// Moves a tick `d` later; a pending one stays pending.
pub(crate) fn later(t: &mut Tick, d: Tick) {
    if *t != PENDING {
        *t += d;
    }
}
