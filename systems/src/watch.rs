//! A look at a long run while it goes: a callback the engine's run loop
//! calls about once per interval of wall time, between schedule runs, with
//! the world as it stands. The engine reports nothing itself; a command
//! that runs for minutes shows its progress through one.

use bevy_ecs::world::World;
use std::time::{Duration, Instant};

/// How often the wall clock is read: reading it at every schedule run would
/// cost a few per cent of a run made of short ticks, and a machine of half
/// a million PEs may take milliseconds a run. So the runs between reads
/// double while reads come less than a millisecond apart and halve when
/// they come more than ten apart.
const CLOCK_READS_APART: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_millis(10));
const MOST_RUNS_PER_CLOCK_READ: u32 = 1024;

/// The callback and when it is next due.
pub struct Watch {
    every: Duration,
    next: Instant,
    /// Schedule runs since the clock was last read, at `read`, and how
    /// many go between reads.
    runs: u32,
    read: Instant,
    stride: u32,
    report: Box<dyn FnMut(&World) + Send>,
}

impl Watch {
    /// Calls `report` about every `every` of wall time, the first time
    /// `every` after now.
    pub fn new(every: Duration, report: impl FnMut(&World) + Send + 'static) -> Watch {
        let now = Instant::now();
        Watch {
            every,
            next: now + every,
            runs: 0,
            read: now,
            stride: 1,
            report: Box::new(report),
        }
    }

    /// After a schedule run: calls the report if its time has come.
    pub(crate) fn poll(&mut self, world: &World) {
        self.runs += 1;
        if self.runs < self.stride {
            return;
        }
        self.runs = 0;
        let now = Instant::now();
        let apart = now - self.read;
        self.read = now;
        if apart < CLOCK_READS_APART.0 {
            self.stride = (self.stride * 2).min(MOST_RUNS_PER_CLOCK_READ);
        } else if apart > CLOCK_READS_APART.1 {
            self.stride = (self.stride / 2).max(1);
        }
        if now >= self.next {
            self.next = now + self.every;
            (self.report)(world);
        }
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("every", &self.every).finish()
    }
}
