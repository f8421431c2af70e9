//! Simulated time: the clock and the per-module calendars it jumps between.

use bevy_ecs::prelude::*;
use std::collections::BTreeMap;

/// Simulated time in ticks (tick length comes from the system spec).
pub type Tick = u64;

/// The simulation clock. `advance` moves `now` to the earliest due tick and
/// never visits idle ticks.
#[derive(Resource, Debug, Default, Clone)]
pub struct Clock {
    /// Current tick.
    pub now: Tick,
    /// Schedule runs so far (one per visited tick, plus re-runs when work
    /// was added for the current tick).
    pub steps: u64,
    /// Set by `advance` when nothing is due anywhere: the run is over.
    pub idle: bool,
}

/// Events of one kind, bucketed by the tick at which they are due.
///
/// Buckets are keyed by tick in a B-tree, so the cost of a push grows with the
/// number of *distinct* pending ticks, not with the number of events; emptied
/// bucket vectors are recycled to avoid allocation on the hot path.
#[derive(Debug)]
pub struct Calendar<E> {
    buckets: BTreeMap<Tick, Vec<E>>,
    spare: Vec<Vec<E>>,
    len: usize,
}

impl<E> Default for Calendar<E> {
    fn default() -> Self {
        Self {
            buckets: BTreeMap::new(),
            spare: Vec::new(),
            len: 0,
        }
    }
}

impl<E> Calendar<E> {
    /// Schedules `event` at tick `at`.
    pub fn push(&mut self, at: Tick, event: E) {
        self.len += 1;
        match self.buckets.get_mut(&at) {
            Some(bucket) => bucket.push(event),
            None => {
                let mut bucket = self.spare.pop().unwrap_or_default();
                bucket.push(event);
                self.buckets.insert(at, bucket);
            }
        }
    }

    /// The earliest tick with a pending event.
    pub fn next_due(&self) -> Option<Tick> {
        self.buckets.first_key_value().map(|(t, _)| *t)
    }

    /// Removes and returns every event due at or before `now`, in push order
    /// within a tick. Give the vector back with [`Calendar::recycle`].
    pub fn take_due(&mut self, now: Tick) -> Option<Vec<E>> {
        let (&t, _) = self.buckets.first_key_value()?;
        if t > now {
            return None;
        }
        let bucket = self.buckets.pop_first().map(|(_, b)| b)?;
        self.len -= bucket.len();
        Some(bucket)
    }

    /// Returns an emptied bucket for reuse.
    pub fn recycle(&mut self, mut bucket: Vec<E>) {
        bucket.clear();
        self.spare.push(bucket);
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
}
