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
//! the end of each of its iterations; after that tick the engine encodes
//! the state ([`Sig`]: every calendar entry, register, unit, queue, slot,
//! link, memory port, message and flow, ticks relative to now) and compares
//! it with the last few. A match with `k ≥ 1` periods left in every loop
//! skips them. Runs that carry f16 values, trace, or run synthetic traffic
//! are never skipped (their values or records would be missing), nor is any
//! tick with work left in flight between stages or host messages pending.
//!
//! Layout: one resource, [`Steady`]; what each module contributes to the
//! encoding and how it moves on is in `state` (this module's) and in the
//! modules' own `steady_*` methods.

mod state;

use crate::ids::PeIdx;
use crate::time::Tick;
use bevy_ecs::prelude::*;
use std::collections::VecDeque;

pub(crate) use state::{Sig, later};

/// Snapshots kept to compare with: periods of up to this many pacer iterations are found.
const HISTORY: usize = 4;

/// The fast-forward's state and what it skipped.
#[derive(Resource, Debug)]
pub struct Steady {
    /// Whether periods may be skipped (on unless the engine is told otherwise).
    pub enabled: bool,
    pacer: Option<PeIdx>,
    mark: bool,
    history: VecDeque<state::Snapshot>,
    /// Periods skipped and the ticks they covered, over the world's life.
    pub skipped_periods: u64,
    pub skipped_ticks: Tick,
}

impl Default for Steady {
    fn default() -> Self {
        Self {
            enabled: true,
            pacer: None,
            mark: false,
            history: VecDeque::new(),
            skipped_periods: 0,
            skipped_ticks: 0,
        }
    }
}

impl Steady {
    /// PE `pe` started a new iteration of its loop.
    #[inline]
    pub(crate) fn iteration(&mut self, pe: PeIdx) {
        if !self.enabled {
            return;
        }
        match self.pacer {
            None => {
                self.pacer = Some(pe);
                self.mark = true;
            }
            Some(p) if p == pe => self.mark = true,
            Some(_) => {}
        }
    }

    /// PE `pe` left its loop: if it paced, the next iterating PE paces.
    #[inline]
    pub(crate) fn loop_left(&mut self, pe: PeIdx) {
        if self.pacer == Some(pe) {
            self.pacer = None;
            self.history.clear();
        }
    }
}

/// After a tick: if the pacer started an iteration in it, compares the
/// state with the last few such ticks and skips the periods a match allows.
pub fn observe(world: &mut World) {
    let Some(mut st) = world.get_resource_mut::<Steady>() else {
        return;
    };
    if !std::mem::take(&mut st.mark) {
        return;
    }
    world.resource_scope(|world, mut st: Mut<Steady>| {
        let Some(snap) = state::Snapshot::take(world) else {
            st.history.clear();
            return;
        };
        let earlier = st.history.iter().rev().find(|h| h.words == snap.words);
        if let Some(plan) = earlier.and_then(|h| state::Plan::between(world, h, &snap)) {
            state::apply(world, &plan);
            st.skipped_periods += plan.periods;
            st.skipped_ticks += plan.periods * plan.ticks;
            st.history.clear();
            return;
        }
        if st.history.len() == HISTORY {
            st.history.pop_front();
        }
        st.history.push_back(snap);
    });
}
