//! Progress of long work in estimated seconds, not in items (items differ
//! in cost by orders of magnitude): a bar with an ETA when stderr is a
//! terminal, a plain line about every 5% of the work otherwise. `sweep`
//! shows its points with it; `autotune`, `gemm-sweep`, `tp-mlp` and `bench`
//! their buckets, shapes, TP sizes and phases.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    /// What is counted, e.g. "sweep" and "points".
    what: (String, String),
    items: usize,
    /// Total estimated work, in microseconds of the estimate.
    total: u64,
    state: Mutex<(usize, u64)>,
    start: Instant,
    last_line: AtomicUsize,
}

/// Work units of a weight (microseconds of estimated seconds).
fn units(weight: f64) -> u64 {
    (weight.max(0.0) * 1e6) as u64
}

impl Progress {
    /// Progress of `command` over items (named `items`, e.g. "points")
    /// whose estimated seconds are `weights`.
    pub fn new(command: &str, items: &str, weights: &[f64]) -> Progress {
        let total = weights.iter().map(|&w| units(w)).sum();
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:40}] {msg}, ETA {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            // The clock moves between completions too.
            b.enable_steady_tick(std::time::Duration::from_secs(1));
            b
        });
        Progress {
            bar,
            what: (command.into(), items.into()),
            items: weights.len(),
            total,
            state: Mutex::new((0, 0)),
            start: Instant::now(),
            last_line: AtomicUsize::new(0),
        }
    }

    /// One item of estimated `weight` seconds is done; `label` says which.
    pub fn tick(&self, weight: f64, label: &str) {
        let (done, work) = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.0 += 1;
            s.1 += units(weight);
            *s
        };
        let (command, items) = &self.what;
        match &self.bar {
            Some(b) => {
                b.set_position(work);
                b.set_message(format!("{done}/{} {items} ({label})", self.items));
            }
            None => {
                // About every 5% of the work (and the last item), one line.
                let bucket = (work * 20 / self.total.max(1)) as usize;
                if bucket > self.last_line.fetch_max(bucket, Ordering::SeqCst) || done == self.items
                {
                    let secs = self.start.elapsed().as_secs_f64();
                    let left = self.total.saturating_sub(work) as f64;
                    let eta = secs / work.max(1) as f64 * left;
                    eprintln!(
                        "{command}: {done}/{} {items} ({:.0}% of the estimated work), {secs:.0} s elapsed, ETA {eta:.0} s",
                        self.items,
                        work as f64 / self.total.max(1) as f64 * 100.0
                    );
                }
            }
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
