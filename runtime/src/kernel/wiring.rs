//! Neighbour tables for common shapes (the collective library adds its own).
//!
//! Wiring says which queues a PE has and how big they are; where each
//! queue's slots sit is decided by [`crate::machine::Machine::install`], which
//! allocates every slot area in its buffer memory (`base` is 0 until then).

use kernbench_spec::topology::address::Space;
use kernbench_systems::PeIdx;
use kernbench_systems::ipcq::{Entry, Tables};
use kernbench_systems::program::QDir;

/// Receive-buffer settings of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Memory holding the receive slots.
    pub buffer: Space,
    pub n_slots: u32,
    pub slot_size: u64,
}

impl QueueConfig {
    /// The entry `dir → peer` (known to the peer as `peer_dir`); placed at install.
    pub fn entry(&self, dir: QDir, peer: PeIdx, peer_dir: QDir) -> Entry {
        Entry {
            dir,
            peer_dir,
            peer,
            buffer: self.buffer,
            base: 0,
            n_slots: self.n_slots,
            slot_size: self.slot_size,
        }
    }
}

/// A bidirectional ring over `pes` (global PE indices): `fwd` leads to the
/// next PE, `fwd.opposite()` to the previous one. Needs at least 2 PEs; with
/// 2, both directions lead to the same peer and stay distinct queues.
pub fn ring(pes: &[PeIdx], fwd: QDir, q: QueueConfig) -> Result<Tables, String> {
    let n = pes.len();
    if n < 2 {
        return Err(format!("a ring needs at least 2 PEs, got {n}"));
    }
    Ok((0..n)
        .map(|i| {
            let entries = vec![
                q.entry(fwd, pes[(i + 1) % n], fwd.opposite()),
                q.entry(fwd.opposite(), pes[(i + n - 1) % n], fwd),
            ];
            (pes[i], entries)
        })
        .collect())
}
