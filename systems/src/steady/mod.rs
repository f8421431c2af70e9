//! Steady-state fast-forward: when the whole machine's state repeats,
//! shifted in time, from one loop iteration of a PE to a later one, the run
//! is periodic from there on, and whole periods are skipped at once.
//!
//! The engine is deterministic: what happens next depends only on its state
//! and on the ops the programs will issue. So if the state at tick `t`
//! equals the state at an earlier `t₀` with every tick moved `D = t − t₀`
//! later (and message ids, queue counters and loop iterations moved on by
//! what one period adds), and the ops the loops issue over the coming
//! periods have the sizes they had over the last one, then the run repeats
//! that period: after `k` more periods its state is this one shifted `k·D`
//! ticks, and every counter (link bytes and busy time, memory busy time,
//! hops, messages, ops) grew by `k` times its growth over one period. The
//! skip is exact, in packet and flow mode alike: the same ticks and
//! statistics as running every period, not an estimate.
//!
//! Detection: a *pacer* (the first PE seen starting a loop iteration) marks
//! every `stride`-th of its iterations; after that tick the engine encodes
//! the state ([`Sig`]: every calendar entry, register, unit, queue, slot,
//! link, memory port, message and flow, ticks relative to now) and compares
//! it with the earlier ones kept. A match with `k ≥ 1` periods left in every
//! loop skips them. Encoding costs time in the size of the machine, so the
//! stride doubles whenever the run did less than [`WORK_PER_WORD`]⁻¹ of a
//! unit of work (an op issued, a packet hop or a delivery) per word since the
//! last snapshot: a run that never repeats pays a few per cent for looking. Runs that carry values, trace, or run synthetic traffic
//! are never skipped (their values or records would be missing), nor is any
//! tick with work left in flight between stages or host messages pending.
//!
//! Layout: one resource, [`Steady`]; what each module contributes to the
//! encoding and how it moves on is in `state` (this module's) and in the
//! modules' own `steady_*` methods.

mod state;

use crate::exec::{OpsIssued, PeExec};
use crate::ids::PeIdx;
use crate::network::flow::Flow;
use crate::network::{Message, NetCounters};
use crate::time::Tick;
use bevy_ecs::prelude::*;
use std::collections::VecDeque;

pub(crate) use state::{Sig, later};

/// Snapshots kept to compare with: periods of up to this many snapshots are found.
const HISTORY: usize = 64;
/// Words (state and counters) all kept snapshots may hold together (8
/// bytes each: 32 MiB).
const HISTORY_WORDS: usize = 4 << 20;
/// Units of work (ops issued, packet hops, deliveries) a snapshot's words
/// must be outweighed by: encoding a word costs about a fiftieth of a unit.
const WORK_PER_WORD: u64 = 32;

/// The queries the fast-forward reads and moves the world through, made
/// once per world: a query made anew at every look leaves its bookkeeping
/// in the world, which then grows with the run.
#[derive(Debug)]
pub(crate) struct Queries {
    pub(crate) execs: QueryState<&'static PeExec>,
    pub(crate) execs_mut: QueryState<&'static mut PeExec>,
    pub(crate) msgs: QueryState<(Entity, &'static Message, Option<&'static Flow>)>,
    pub(crate) msgs_mut: QueryState<(&'static mut Message, Option<&'static mut Flow>)>,
}

impl Queries {
    fn new(world: &mut World) -> Self {
        Self {
            execs: world.query(),
            execs_mut: world.query(),
            msgs: world.query(),
            msgs_mut: world.query(),
        }
    }
}

/// The fast-forward's state and what it skipped.
#[derive(Resource, Debug)]
pub struct Steady {
    /// Whether periods may be skipped (on unless the engine is told otherwise).
    pub enabled: bool,
    pacer: Option<PeIdx>,
    /// Pacer iterations between snapshots, and since the last one.
    stride: u32,
    since: u32,
    mark: bool,
    history: VecDeque<state::Snapshot>,
    /// Work done and words encoded at the last snapshot.
    last_work: u64,
    last_words: usize,
    queries: Option<Queries>,
    /// Periods skipped and the ticks they covered, over the world's life.
    pub skipped_periods: u64,
    pub skipped_ticks: Tick,
}

impl Default for Steady {
    fn default() -> Self {
        Self {
            enabled: true,
            pacer: None,
            stride: 1,
            since: 0,
            mark: false,
            history: VecDeque::new(),
            last_work: 0,
            last_words: 0,
            queries: None,
            skipped_periods: 0,
            skipped_ticks: 0,
        }
    }
}

impl Steady {
    /// PE `pe` started a new iteration of its loop.
    #[inline]
    pub(crate) fn iteration(&mut self, pe: PeIdx) {
        if !self.enabled || self.pacer.is_some_and(|p| p != pe) {
            return;
        }
        self.pacer = Some(pe);
        self.since += 1;
        if self.since >= self.stride {
            self.since = 0;
            self.mark = true;
        }
    }

    /// Drops the snapshots kept (and their memory): the host is about to
    /// change the world between runs, so they can no longer match.
    pub(crate) fn forget(&mut self) {
        self.restart();
        self.history = VecDeque::new();
        self.stride = 1;
        self.last_words = 0;
    }

    /// PE `pe` left its loop: if it paced, the next iterating PE paces.
    #[inline]
    pub(crate) fn loop_left(&mut self, pe: PeIdx) {
        if self.pacer == Some(pe) {
            self.restart();
        }
    }

    /// Starts looking afresh: no pacer, no snapshot to compare with.
    fn restart(&mut self) {
        self.pacer = None;
        self.since = 0;
        self.mark = false;
        self.history.clear();
    }
}

/// Units of work the run has done: ops issued, packet hops, deliveries.
fn work(world: &World) -> u64 {
    let net = world.resource::<NetCounters>();
    world.resource::<OpsIssued>().0 + net.hops + net.delivered
}

/// After a tick: if the pacer marked it, compares the state with the
/// earlier marked ticks and skips the periods a match allows.
pub fn observe(world: &mut World) {
    // Read first: most schedule runs end without a mark.
    if !world.get_resource::<Steady>().is_some_and(|st| st.mark) {
        return;
    }
    let mut st = world.resource_mut::<Steady>();
    st.mark = false;
    // Taken out and put back by value: the world keeps the resource's slot
    // (a resource scope leaves bookkeeping behind at every use).
    let mut st = std::mem::take(&mut *st);
    let mut queries = st.queries.take().unwrap_or_else(|| Queries::new(world));
    look(world, &mut st, &mut queries);
    st.queries = Some(queries);
    *world.resource_mut::<Steady>() = st;
}

/// Takes a snapshot, unless looking would cost too much for the work
/// between looks (then looks less often), and skips the periods a match
/// with an earlier one allows.
fn look(world: &mut World, st: &mut Steady, q: &mut Queries) {
    let done = work(world);
    let since = done - st.last_work;
    st.last_work = done;
    if since.saturating_mul(WORK_PER_WORD) < st.last_words as u64 {
        st.stride = st.stride.saturating_mul(2);
        st.history.clear();
        st.last_words = 0;
        return;
    }
    let Some(snap) = state::Snapshot::take(world, q) else {
        st.history.clear();
        return;
    };
    st.last_words = snap.words.len();
    let earlier = st.history.iter().rev().find(|h| h.same_state(&snap));
    if let Some(plan) = earlier.and_then(|h| state::Plan::between(world, q, h, &snap)) {
        state::apply(world, q, &plan);
        st.skipped_periods += plan.periods;
        st.skipped_ticks += plan.periods * plan.ticks;
        st.history.clear();
        st.last_work = work(world);
        return;
    }
    let keep = snapshots_kept(snap.held_words());
    while st.history.len() >= keep {
        st.history.pop_front();
    }
    st.history.push_back(snap.kept());
}

/// How many snapshots of `held_words` words each the history keeps.
fn snapshots_kept(held_words: usize) -> usize {
    (HISTORY_WORDS / held_words.max(1)).clamp(1, HISTORY)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring all-reduce on 4096 one-cube SIPs (`bench --collective`)
    /// encodes 790,544 words a snapshot (516,104 of state, the rest
    /// counters) and repeats over more than two looks: a history of two such
    /// snapshots never matched, and the run simulated every period; five
    /// find its period.
    #[test]
    fn a_4096_sip_ring_keeps_a_history_that_spans_its_period() {
        assert_eq!(snapshots_kept(790_544), 5);
        assert_eq!(snapshots_kept(0), HISTORY);
        assert_eq!(snapshots_kept(usize::MAX), 1);
    }
}
