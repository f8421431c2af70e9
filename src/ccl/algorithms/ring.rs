//! `ring`: one logical ring over all participants in index order.
//! All-reduce is reduce-scatter + all-gather (bandwidth-optimal: each
//! participant sends 2(n−1)/n of the buffer); broadcast and reduce are
//! pipelined chains along the ring.

use crate::ccl::kernels::{Buffer, Keep, Ring, RingJob, all_gather, grid_cycle, reduce_scatter};
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
    let (job, op, chunks) = (a.job, a.job.op, a.chunks);
    match job.collective {
        Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather => {
            let ring = Ring {
                n,
                me: tl.param(me as i64),
                next: QDir::E,
                prev: QDir::W,
            };
            let mut buf = Buffer::new(a.buffer(tl), job.elems, &[n, chunks]);
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
        Collective::Broadcast => {
            // Chain 0 → 1 → … → n−1, atom by atom.
            let mut buf = Buffer::new(a.buffer(tl), job.elems, &[chunks]);
            let all = buf.atoms(&[]);
            if me == 0 {
                buf.load(tl, &all);
                buf.send(tl, &all, QDir::E);
                return;
            }
            let to = (me + 1 < n).then_some(QDir::E);
            for c in &all {
                buf.recv_replace(tl, c, QDir::W, to);
            }
            buf.store(tl, &all);
        }
        Collective::Reduce => {
            // Chain n−1 → … → 0, reducing on the way.
            let mut buf = Buffer::new(a.buffer(tl), job.elems, &[chunks]);
            let all = buf.atoms(&[]);
            buf.load(tl, &all);
            if me == n - 1 {
                buf.send(tl, &all, QDir::W);
                return;
            }
            let to = (me > 0).then_some(QDir::W);
            for c in &all {
                buf.recv_combine(tl, op, c, QDir::E, to);
            }
            if me == 0 {
                buf.store(tl, &all);
            }
        }
        Collective::AllToAll => {
            unreachable!("ring does not list all_to_all: Communicator::supports refuses it first")
        }
    }
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
        &[
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::Broadcast,
            Collective::Reduce,
        ]
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Vec<(u32, Vec<Entry>)> {
        let n = g.size();
        if n < 2 {
            return Vec::new();
        }
        let order = ring_order(g);
        (0..n)
            .map(|k| {
                let next = g.pe(order[(k + 1) % n]);
                let prev = g.pe(order[(k + n - 1) % n]);
                (
                    g.pe(order[k]),
                    vec![
                        q.entry(QDir::E, next, QDir::W),
                        q.entry(QDir::W, prev, QDir::E),
                    ],
                )
            })
            .collect()
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
}
