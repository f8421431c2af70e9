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

pub struct RingAlgo;

/// This participant's index from its program ids.
pub fn me(tl: &mut Tl, g: &Group) -> usize {
    let (sip, cube) = (tl.program_id(0), tl.program_id(1));
    g.participant(sip, cube)
}

/// Participants in ring order: SIPs along a cycle of the SIP grid, and within
/// each SIP its cubes along a cycle of the cube mesh, so most ring hops join
/// neighbours. Participant 0 comes first.
pub fn ring_order(g: &Group) -> Vec<usize> {
    let cubes = grid_cycle(g.cubes.0, g.cubes.1);
    grid_cycle(g.grid.0, g.grid.1)
        .into_iter()
        .flat_map(|s| cubes.iter().map(move |&c| g.participant(s, c)))
        .collect()
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let n = a.group.size();
    let participant = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let order = ring_order(&a.group);
    let me = order
        .iter()
        .position(|&p| p == participant)
        .expect("every participant is on the ring");
    let (job, op, chunks) = (a.job, a.job.op, a.chunks);
    let ring = Ring {
        n,
        me,
        next: QDir::E,
        prev: QDir::W,
    };
    match job.collective {
        Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather => {
            let mut buf = Buffer::new(job.elems, &[n, chunks]);
            // Ring block k holds the data block of the participant at position
            // k, so all-gather starts from each member's own block; for
            // reduce-scatter the blocks shift by one, since it leaves position
            // k with ring block k+1 and the member must end with its own.
            let shift = usize::from(job.collective == Collective::ReduceScatter) * (n - 1);
            let blocks = (0..n)
                .map(|k| buf.range(&[order[(k + shift) % n]]))
                .collect();
            let j = [RingJob { ring, blocks }];
            if job.collective == Collective::AllGather {
                buf.load(tl, j[0].blocks[me].clone());
                all_gather(
                    tl,
                    &mut buf,
                    &j,
                    &[me],
                    Keep {
                        own: false,
                        received: true,
                    },
                );
                return;
            }
            reduce_scatter(tl, op, &mut buf, &j);
            if job.collective == Collective::ReduceScatter {
                buf.store(tl, j[0].blocks[j[0].owned()].clone());
                return;
            }
            all_gather(
                tl,
                &mut buf,
                &j,
                &[j[0].owned()],
                Keep {
                    own: true,
                    received: true,
                },
            );
        }
        Collective::Broadcast => {
            // Chain 0 → 1 → … → n−1, atom by atom.
            let mut buf = Buffer::new(job.elems, &[chunks]);
            let all = buf.range(&[]);
            if me == 0 {
                buf.load(tl, all.clone());
                buf.send(tl, all, QDir::E);
                return;
            }
            let to = (me + 1 < n).then_some(QDir::E);
            for c in all.clone() {
                buf.recv_replace(tl, c, QDir::W, to);
            }
            buf.store(tl, all);
        }
        Collective::Reduce => {
            // Chain n−1 → … → 0, reducing on the way.
            let mut buf = Buffer::new(job.elems, &[chunks]);
            let all = buf.range(&[]);
            buf.load(tl, all.clone());
            if me == n - 1 {
                buf.send(tl, all, QDir::W);
                return;
            }
            let to = (me > 0).then_some(QDir::W);
            for c in all.clone() {
                buf.recv_combine(tl, op, c, QDir::E, to);
            }
            if me == 0 {
                buf.store(tl, all);
            }
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
    fn collectives(&self) -> &'static [Collective] {
        &Collective::ALL
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
