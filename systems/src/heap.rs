//! The heap ceiling every run checks after each schedule run.
//!
//! A run's cost estimate cannot see all of its memory (programs while they
//! are traced, the records of issued sends and receives, the values
//! registers hold when a run carries values), so a
//! run that outgrows the process's memory budget stops with an error naming
//! the budget instead of being killed by the operating system, work and all.
//! The heap is the process's, so the ceiling is too: the binary installs a
//! probe that reads the heap in use (the engine does not know the allocator)
//! and sets the ceiling from its memory budget. Without a probe nothing is
//! checked.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

static PROBE: OnceLock<fn() -> u64> = OnceLock::new();
static CEILING: AtomicU64 = AtomicU64::new(u64::MAX);

/// Installs the function that reads the heap bytes in use (once per process).
pub fn install_probe(probe: fn() -> u64) {
    let _ = PROBE.set(probe);
}

/// Sets the heap bytes runs may hold.
pub fn set_ceiling(bytes: u64) {
    CEILING.store(bytes, Ordering::Relaxed);
}

/// The heap bytes in use and the ceiling, when a probe is installed and the
/// heap is above the ceiling.
pub fn over_ceiling() -> Option<(u64, u64)> {
    let used = PROBE.get()?();
    let ceiling = CEILING.load(Ordering::Relaxed);
    (used > ceiling).then_some((used, ceiling))
}

/// Bytes for messages: MiB below a GiB, else GiB.
pub fn size(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b < 1024.0 * MIB {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    }
}
