//! Neighbour tables for common shapes (the collective library adds its own).

use crate::topology::address::Space;
use kernbench_systems::ipcq::Entry;
use kernbench_systems::program::QDir;

/// Receive-buffer settings of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    pub buffer: Space,
    pub n_slots: u32,
    pub slot_size: u64,
    /// Offset of the first queue's slot 0 in the buffer memory; further
    /// queues of the same PE follow it.
    pub base: u64,
}

/// A bidirectional ring over `pes` (global PE indices): `fwd` leads to the
/// next PE, `fwd.opposite()` to the previous one. Needs at least 2 PEs; with
/// 2, both directions lead to the same peer and stay distinct queues.
pub fn ring(pes: &[u32], fwd: QDir, q: QueueConfig) -> Result<Vec<(u32, Vec<Entry>)>, String> {
    let n = pes.len();
    if n < 2 {
        return Err(format!("a ring needs at least 2 PEs, got {n}"));
    }
    let size = q.n_slots as u64 * q.slot_size;
    Ok((0..n)
        .map(|i| {
            let entry = |dir: QDir, peer: u32, k: u64| Entry {
                dir,
                peer_dir: dir.opposite(),
                peer,
                buffer: q.buffer,
                base: q.base + k * size,
                n_slots: q.n_slots,
                slot_size: q.slot_size,
            };
            let entries = vec![
                entry(fwd, pes[(i + 1) % n], 0),
                entry(fwd.opposite(), pes[(i + n - 1) % n], 1),
            ];
            (pes[i], entries)
        })
        .collect())
}
