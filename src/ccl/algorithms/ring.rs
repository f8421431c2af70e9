//! `ring`: one logical ring over all participants in index order.
//! All-reduce is reduce-scatter + all-gather (bandwidth-optimal: each
//! participant sends 2(n−1)/n of the buffer); broadcast and reduce are
//! pipelined chains along the ring.

use crate::ccl::kernels::{
    Buffer, Chain, ChainKind, Keep, Ring, RingJob, all_gather, grid_cycle, reduce_scatter,
    run_chains,
};
use crate::ccl::{Algorithm, Collective, Group, KernelArgs};
use crate::kernel::Tl;
use crate::kernel::wiring::QueueConfig;
use kernbench_systems::ipcq::Entry;
use kernbench_systems::program::QDir;
use std::sync::Arc;

pub struct RingAlgo;

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

/// `ring_order` and its inverse (participant → ring position), shared by the PEs of a launch.
fn ring_tables(tl: &mut Tl, g: &Group) -> (Arc<[u32]>, Arc<[u32]>) {
    let order = tl.table("ring order", || {
        ring_order(g).into_iter().map(|p| p as u32).collect()
    });
    let position = tl.table("ring position", || {
        let mut pos = vec![0u32; order.len()];
        for (k, &p) in order.iter().enumerate() {
            pos[p as usize] = k as u32;
        }
        pos
    });
    (order, position)
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let n = a.group.size();
    let participant = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let (order, position) = ring_tables(tl, &a.group);
    let me = position[participant] as usize;
    let (job, op) = (a.job, a.job.op);
    match job.collective {
        Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather => {
            let ring = Ring {
                n,
                me: tl.param(me as i64),
                next: QDir::E,
                prev: QDir::W,
            };
            let mut buf = Buffer::new(a.buffer(tl), job.elems, &[n, a.pieces(job.elems / n, 1)]);
            // Ring block k holds the data block of the participant at position
            // k, so all-gather starts from each member's own block; for
            // reduce-scatter the blocks shift by one, since it leaves position
            // k with ring block k+1 and the member must end with its own.
            let order = if job.collective == Collective::ReduceScatter {
                tl.table("ring order shifted", || {
                    (0..n).map(|k| order[(k + n - 1) % n]).collect()
                })
            } else {
                order
            };
            let j = [RingJob {
                ring,
                prefix: Vec::new(),
                order: Some(order),
                suffix: Vec::new(),
            }];
            let keep = |own| Keep {
                own,
                received: true,
                reuse: false,
            };
            if job.collective == Collective::AllGather {
                buf.load(tl, &buf.atoms(&j[0].block(ring.me)));
                all_gather(tl, &mut buf, &j, &[ring.me], keep(false));
                return;
            }
            reduce_scatter(tl, op, &mut buf, &j);
            if job.collective == Collective::ReduceScatter {
                buf.store(tl, &buf.atoms(&j[0].block(j[0].owned())));
                return;
            }
            all_gather(tl, &mut buf, &j, &[j[0].owned()], keep(true));
        }
        Collective::Broadcast | Collective::Reduce => {
            // One chain: broadcast 0 → 1 → … → n−1, reduce n−1 → … → 0.
            let pieces = a.pieces(job.elems, n - 1);
            let buf = Buffer::new(a.buffer(tl), job.elems, &[pieces]);
            let (kind, chain) = if job.collective == Collective::Broadcast {
                let from = (me > 0).then_some(QDir::W);
                let to = (me + 1 < n).then_some(QDir::E);
                let chain = Chain::whole(Vec::new(), from, to, me, pieces);
                (ChainKind::Broadcast, chain)
            } else {
                let from = (me + 1 < n).then_some(QDir::E);
                let to = (me > 0).then_some(QDir::W);
                let chain = Chain::whole(Vec::new(), from, to, n - 1 - me, pieces);
                (ChainKind::Reduce(op), chain)
            };
            run_chains(tl, &buf, kind, &[chain], pieces);
        }
        Collective::AllToAll => {
            unreachable!("ring does not list all_to_all: Communicator::supports refuses it first")
        }
    }
}

/// The queues of cycle c of a participant: its successor on `CYCLE_NEXT[c]`,
/// its predecessor on `CYCLE_PREV[c]` (`ring` has one cycle, `bidir_ring`
/// up to two).
pub const CYCLE_NEXT: [QDir; 2] = [QDir::E, QDir::S];
pub const CYCLE_PREV: [QDir; 2] = [QDir::W, QDir::N];

/// Each participant's queues to its neighbours on every cycle of `cycles`
/// (participant orders), both ways.
pub fn cycle_wiring(g: &Group, q: &QueueConfig, cycles: &[Vec<usize>]) -> Vec<(u32, Vec<Entry>)> {
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
        .map(|(p, e)| (g.pe(p), e))
        .collect()
}

impl Algorithm for RingAlgo {
    fn name(&self) -> &'static str {
        "ring"
    }
    fn summary(&self) -> &'static str {
        "one ring over all participants: reduce-scatter + all-gather; chains for broadcast and reduce"
    }
    fn every_pe(&self) -> bool {
        true
    }
    fn collectives(&self) -> &'static [Collective] {
        &Collective::RING
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Vec<(u32, Vec<Entry>)> {
        cycle_wiring(g, q, &[ring_order(g)])
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
}
