//! Simulated time: the clock and the per-module calendars it jumps between.

use bevy_ecs::prelude::*;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Simulated time in ticks (tick length comes from the system spec).
pub type Tick = u64;

/// `ready_at` of a register whose value has not landed yet, and the end of
/// a traced op that has not finished.
pub const PENDING: Tick = Tick::MAX;

/// The simulation clock. `advance` moves `now` to the earliest due tick and
/// never visits idle ticks.
#[derive(Resource, Debug, Default, Clone)]
pub struct Clock {
    /// Current tick.
    pub now: Tick,
    /// The tick the schedule last ran at (`now` before `advance` moved it
    /// on): a run that stops because the host's condition holds moves the
    /// clock back here, so the host's next launch leaves at the tick its
    /// awaited work ended, not at the next event of other work in flight.
    pub last_run: Tick,
    /// Schedule runs so far (one per visited tick, plus re-runs when work
    /// was added for the current tick or a run stopped at it).
    pub steps: u64,
    /// The part of `steps` that ran the whole schedule (the rest only
    /// routed packets: `Engine::route_ahead`); what a run's wall time
    /// follows besides its messages and packet-hops.
    pub schedule_runs: u64,
    /// Set by `advance` when nothing is due anywhere: the run is over.
    pub idle: bool,
}

/// Events of one kind, bucketed by the tick at which they are due.
///
/// Buckets live in a slab; a hash map finds the bucket of a pending tick and
/// a min-heap of the distinct pending ticks gives the earliest. A push to a
/// pending tick costs one hash look-up, a new tick a heap push: no search or
/// shift over the pending ticks, which matters when thousands of packets in
/// flight land on interleaved ticks. Lock-step workloads push to a handful
/// of ticks over and over, so the last few buckets used are remembered and
/// hit without hashing. Emptied bucket vectors are recycled: the hot path
/// does not allocate.
#[derive(Debug)]
pub struct Calendar<E> {
    /// Pending tick -> its bucket's slot.
    slots: FxHashMap<Tick, u32>,
    /// The pending ticks, each once, earliest on top.
    ticks: BinaryHeap<Reverse<Tick>>,
    slab: Vec<Vec<E>>,
    free_slots: Vec<u32>,
    spare: Vec<Vec<E>>,
    recent: [(Tick, u32); RECENT],
    victim: usize,
    len: usize,
}

const RECENT: usize = 4;
/// Spare bucket vectors kept for reuse, and the capacity each keeps.
const SPARE_BUCKETS: usize = 256;
const SPARE_CAPACITY: usize = 8192;
const NO_SLOT: u32 = u32::MAX;

impl<E> Default for Calendar<E> {
    fn default() -> Self {
        Self {
            slots: FxHashMap::default(),
            ticks: BinaryHeap::new(),
            slab: Vec::new(),
            free_slots: Vec::new(),
            spare: Vec::new(),
            recent: [(0, NO_SLOT); RECENT],
            victim: 0,
            len: 0,
        }
    }
}

impl<E> Calendar<E> {
    /// Schedules `event` at tick `at`.
    #[inline]
    pub fn push(&mut self, at: Tick, event: E) {
        self.len += 1;
        let slot = match self.recent.iter().find(|r| r.0 == at && r.1 != NO_SLOT) {
            Some(r) => r.1,
            None => self.slot_for(at),
        };
        self.slab[slot as usize].push(event);
    }

    fn slot_for(&mut self, at: Tick) -> u32 {
        let slot = match self.slots.get(&at) {
            Some(&slot) => slot,
            None => {
                let bucket = self.spare.pop().unwrap_or_default();
                let slot = match self.free_slots.pop() {
                    Some(slot) => {
                        self.slab[slot as usize] = bucket;
                        slot
                    }
                    None => {
                        self.slab.push(bucket);
                        self.slab.len() as u32 - 1
                    }
                };
                self.slots.insert(at, slot);
                self.ticks.push(Reverse(at));
                slot
            }
        };
        self.recent[self.victim] = (at, slot);
        self.victim = (self.victim + 1) % RECENT;
        slot
    }

    /// The earliest bucket's tick and events, left in place.
    pub fn front(&self) -> Option<(Tick, &[E])> {
        let t = self.next_due()?;
        Some((t, &self.slab[self.slots[&t] as usize]))
    }

    /// The earliest tick with a pending event.
    pub fn next_due(&self) -> Option<Tick> {
        self.ticks.peek().map(|r| r.0)
    }

    /// Removes and returns the events of the earliest bucket if it is due at
    /// or before `now`, in push order. Give the vector back with [`Calendar::recycle`].
    pub fn take_due(&mut self, now: Tick) -> Option<Vec<E>> {
        let t = self.next_due().filter(|&t| t <= now)?;
        self.ticks.pop();
        let slot = self.slots.remove(&t).expect("a pending tick has a bucket");
        for r in &mut self.recent {
            if r.1 == slot {
                r.1 = NO_SLOT;
            }
        }
        self.free_slots.push(slot);
        let bucket = std::mem::take(&mut self.slab[slot as usize]);
        self.len -= bucket.len();
        Some(bucket)
    }

    /// Returns an emptied bucket for reuse. A burst can leave a bucket with a
    /// huge capacity; keeping many of those would hold memory for nothing,
    /// so big buckets shrink and the spare pool is bounded.
    pub fn recycle(&mut self, mut bucket: Vec<E>) {
        bucket.clear();
        if self.spare.len() < SPARE_BUCKETS {
            bucket.shrink_to(SPARE_CAPACITY);
            self.spare.push(bucket);
        }
    }

    /// Every pending event with its tick, in tick order (push order within a tick).
    pub fn iter(&self) -> impl Iterator<Item = (Tick, &E)> {
        let mut pending: Vec<(Tick, u32)> = self.slots.iter().map(|(&t, &s)| (t, s)).collect();
        pending.sort_unstable_by_key(|e| e.0);
        pending
            .into_iter()
            .flat_map(|(t, slot)| self.slab[slot as usize].iter().map(move |e| (t, e)))
    }

    /// Rewrites every pending event in place.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut E)) {
        for &slot in self.slots.values() {
            self.slab[slot as usize].iter_mut().for_each(&mut f);
        }
    }

    /// Moves every pending event `d` ticks later (order unchanged).
    pub fn shift(&mut self, d: Tick) {
        self.slots = self.slots.drain().map(|(t, s)| (t + d, s)).collect();
        // A uniform shift keeps the heap order.
        let ticks = std::mem::take(&mut self.ticks).into_vec();
        self.ticks = ticks.into_iter().map(|Reverse(t)| Reverse(t + d)).collect();
        for r in &mut self.recent {
            r.0 += d;
        }
    }

    /// Pending events.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn calendar_returns_events_in_tick_order_and_push_order() {
        let mut c = Calendar::default();
        c.push(5, 'b');
        c.push(2, 'a');
        c.push(5, 'c');
        assert_eq!(c.len(), 3);
        assert_eq!(c.next_due(), Some(2));
        assert_eq!(c.take_due(1), None);
        assert_eq!(c.take_due(2), Some(vec!['a']));
        assert_eq!(c.take_due(9), Some(vec!['b', 'c']));
        assert!(c.is_empty());
        assert_eq!(c.next_due(), None);
    }

    #[test]
    fn calendar_matches_a_sorted_reference_under_churn() {
        // Pseudo-random pushes interleaved with takes, against a stable sort.
        let mut c = Calendar::default();
        let mut reference: Vec<(Tick, u32)> = Vec::new();
        let mut out = Vec::new();
        let (mut x, mut now) = (12345u64, 0u64);
        for i in 0..20_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = now + (x >> 33) % 9;
            c.push(at, (at, i));
            reference.push((at, i));
            if i % 3 == 0 {
                while let Some(b) = c.take_due(now) {
                    out.extend(b.iter().copied());
                    c.recycle(b);
                }
                now += 1;
            }
        }
        while let Some(t) = c.next_due() {
            let b = c.take_due(t).unwrap();
            out.extend(b.iter().copied());
            c.recycle(b);
        }
        reference.sort_by_key(|e| e.0);
        assert_eq!(out, reference);
    }

    /// Far pushes, pushes for passed ticks and bursts at one tick: every
    /// take equals that of a plain map of tick -> events in push order.
    #[test]
    fn calendar_matches_a_map_with_far_and_past_ticks() {
        let mut c = Calendar::default();
        let mut reference: BTreeMap<Tick, Vec<u32>> = BTreeMap::new();
        let (mut x, mut now) = (987654321u64, 0u64);
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for i in 0..60_000u32 {
            let r = next();
            let at = match r % 10 {
                0 => now + 4096 + r % 50_000,
                1 => now.saturating_sub(r % 40),
                2 => now + 4095 - r % 3,
                _ => now + r % 700,
            };
            c.push(at, i);
            reference.entry(at).or_default().push(i);
            if i % 4 == 0 {
                now += next() % 300;
                loop {
                    let want = reference
                        .first_key_value()
                        .filter(|(t, _)| **t <= now)
                        .map(|(t, _)| *t);
                    let got = c.take_due(now);
                    assert_eq!(got, want.map(|t| reference.remove(&t).unwrap()), "at {now}");
                    match got {
                        Some(b) => c.recycle(b),
                        None => break,
                    }
                    assert_eq!(c.next_due(), reference.first_key_value().map(|(t, _)| *t));
                }
            }
        }
        assert_eq!(c.len(), reference.values().map(Vec::len).sum::<usize>());
    }
}
