//! Helpers several algorithms share: a participant's index, the ring
//! order and its queues, the levels of a binomial tree. Algorithm files
//! import from here, never from one another.

use crate::Group;
use crate::kernels::grid_cycle;
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_systems::ipcq::{Entry, Tables};
use kernbench_systems::program::QDir;

/// This participant's index from its program ids.
pub fn me(tl: &mut Tl, g: &Group) -> usize {
    let (sip, cube, pe) = (tl.program_id(0), tl.program_id(1), tl.program_id(2));
    g.participant_at(sip, cube, pe)
}

/// Participants in ring order: SIPs along a cycle of the SIP grid, within
/// each SIP its cubes along a cycle of the cube mesh, within a cube its
/// participating PEs in order, so most ring hops join neighbours.
/// Participant 0 comes first.
pub fn ring_order(g: &Group) -> Vec<usize> {
    let cubes = grid_cycle(g.cubes.0, g.cubes.1);
    grid_cycle(g.grid.0, g.grid.1)
        .into_iter()
        .flat_map(|s| {
            cubes
                .iter()
                .flat_map(move |&c| (0..g.pes as usize).map(move |q| g.participant(s, c) + q))
        })
        .collect()
}

/// The queues of cycle c of a participant: its successor on `CYCLE_NEXT[c]`,
/// its predecessor on `CYCLE_PREV[c]` (`ring` has one cycle, `bidir_ring`
/// up to two).
pub const CYCLE_NEXT: [QDir; 2] = [QDir::E, QDir::S];
pub const CYCLE_PREV: [QDir; 2] = [QDir::W, QDir::N];

/// Each participant's queues to its neighbours on every cycle of `cycles`
/// (participant orders), both ways.
pub fn cycle_wiring(g: &Group, q: &QueueConfig, cycles: &[Vec<usize>]) -> Tables {
    let n = g.size();
    if n < 2 {
        return Vec::new();
    }
    let mut entries: Vec<Vec<Entry>> = vec![Vec::new(); n];
    for (c, order) in cycles.iter().enumerate() {
        for k in 0..n {
            let next = g.pe(order[(k + 1) % n]);
            let prev = g.pe(order[(k + n - 1) % n]);
            let e = &mut entries[order[k]];
            e.push(q.entry(CYCLE_NEXT[c], next, CYCLE_PREV[c]));
            e.push(q.entry(CYCLE_PREV[c], prev, CYCLE_NEXT[c]));
        }
    }
    entries
        .into_iter()
        .enumerate()
        .filter(|(p, _)| g.simulates(*p))
        .map(|(p, e)| (g.pe(p), e))
        .collect()
}

/// ⌈log2 n⌉ (0 for n ≤ 1): the levels of a binomial tree of `n`
/// participants, the steps of Bruck's all-to-all, and the height of a
/// btree's root (dbtree).
pub fn levels(n: usize) -> usize {
    (usize::BITS - (n.max(1) - 1).leading_zeros()) as usize
}
