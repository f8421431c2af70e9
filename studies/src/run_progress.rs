//! `run`'s progress while one size simulates: wall time against the
//! estimate, simulated time and messages delivered, on one status line
//! rewritten every second on a terminal, or a line a minute in a log when
//! the size is estimated to take more than a minute.

use kernbench_systems::Clock;
use kernbench_systems::network::NetCounters;
use kernbench_systems::watch::Watch;
use std::io::Write;
use std::time::{Duration, Instant};

/// Runs estimated to take longer than this show progress in a log.
const LOG_AFTER_SECONDS: f64 = 60.0;

/// What the status line of one placement of one size says besides the run's state.
#[derive(Debug, Clone)]
pub struct SizeProgress {
    pub bytes: u64,
    /// This size's place among the sizes (0-based) and their count.
    pub k: usize,
    pub of: usize,
    pub placement: &'static str,
    /// The estimate of this size's run, in seconds of wall time.
    pub estimate: f64,
    pub tick_ns: f64,
}

impl SizeProgress {
    /// The status line after `elapsed` seconds, at simulated tick `now`
    /// with `delivered` messages delivered by this run.
    pub fn line(&self, elapsed: f64, now: u64, delivered: u64) -> String {
        format!(
            "# simulating {} B ({}/{}), {}: {elapsed:.0} s of about {:.0} s estimated; {:.1} us simulated, {delivered} messages delivered",
            self.bytes,
            self.k + 1,
            self.of,
            self.placement,
            self.estimate,
            now as f64 * self.tick_ns / 1e3,
        )
    }

    /// The engine watch that shows this run's progress on stderr (a
    /// terminal: every second; otherwise a line a minute, for runs estimated
    /// beyond one), or None when nothing would be shown. `delivered_before`
    /// is the network's delivery count when the run starts.
    pub fn watch(self, tty: bool, delivered_before: u64) -> Option<Watch> {
        if !tty && self.estimate <= LOG_AFTER_SECONDS {
            return None;
        }
        let every = Duration::from_secs(if tty { 1 } else { 60 });
        let start = Instant::now();
        Some(Watch::new(every, move |world| {
            let now = world.resource::<Clock>().now;
            let delivered = world.resource::<NetCounters>().delivered - delivered_before;
            let line = self.line(start.elapsed().as_secs_f64(), now, delivered);
            let mut err = std::io::stderr().lock();
            // A status line that cannot be shown is no reason to stop the run.
            let _ = if tty {
                write!(err, "\r{line}\x1b[K")
            } else {
                writeln!(err, "{line}")
            };
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_gives_wall_time_against_the_estimate_simulated_time_and_deliveries() {
        let run = SizeProgress {
            bytes: 67108864,
            k: 0,
            of: 2,
            placement: "out_of_place",
            estimate: 1950.4,
            tick_ns: 1.0,
        };
        assert_eq!(
            run.line(95.2, 412_345, 120_000_000),
            "# simulating 67108864 B (1/2), out_of_place: 95 s of about 1950 s estimated; 412.3 us simulated, 120000000 messages delivered"
        );
    }

    #[test]
    fn a_short_run_in_a_log_shows_nothing() {
        let run = |estimate| SizeProgress {
            bytes: 1024,
            k: 0,
            of: 1,
            placement: "in_place",
            estimate,
            tick_ns: 1.0,
        };
        assert!(run(59.0).watch(false, 0).is_none());
        assert!(run(61.0).watch(false, 0).is_some());
        assert!(run(1.0).watch(true, 0).is_some());
    }
}
