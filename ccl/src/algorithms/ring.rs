//! `ring`: one logical ring over all participants, in ring order (SIPs
//! along a cycle of the SIP grid, cubes along a cycle of each cube mesh:
//! `primitives::ring_order`, so most hops join neighbours).
//! All-reduce is reduce-scatter + all-gather (bandwidth-optimal: each
//! participant sends 2(n−1)/n of the buffer); broadcast and reduce are
//! pipelined chains along the ring.

use super::primitives::{cycle_wiring, me, ring_order};
use crate::cost::{CostTerms, HeldPrograms, InFlight, block_sends};
use crate::kernels::{
    Buffer, Chain, ChainKind, Keep, Ring, RingJob, all_gather, reduce_scatter, run_chains,
};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_spec::spec::SipTopology;
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;
use std::sync::Arc;

pub struct RingAlgo;

/// `ring_order` and its inverse (participant → ring position), shared by the
/// PEs of a launch.
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
            // k, so all-gather starts from each participant's own block; for
            // reduce-scatter the blocks shift by one, since it leaves position
            // k with ring block k+1 and the participant must end with its own.
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
    /// On a ring of SIPs the cycle enters each SIP at the same cube and
    /// leaves it for the next SIP the same way: a shift by one SIP maps it
    /// onto itself. Broadcast and reduce have a root; on a torus the cycle
    /// snakes, and its rows differ.
    fn folds(&self, g: &Group, c: Collective) -> bool {
        g.topology == SipTopology::Ring1d
            && matches!(
                c,
                Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather
            )
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        cycle_wiring(g, q, &[ring_order(g)])
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // Broadcast and reduce run one chain along the ring, piece by piece,
        // each participant a stage behind its neighbour (staggered); every
        // participant of a ring step steps together. Its steps run in loops: a
        // program of a few dozen ops per chunk.
        let chain = matches!(c, Collective::Broadcast | Collective::Reduce);
        let chain_stages = if chain { g.size().max(2) - 1 } else { 1 };
        let (sends, bytes_per_send) = block_sends(g, c, bytes);
        CostTerms {
            sends,
            bytes_per_send,
            stages: chain_stages,
            // Participants simulated step together (a folded group's window).
            lockstep: if chain {
                1.0
            } else {
                g.simulated_size().max(1) as f64
            },
            register_pieces: 1.0,
            programs: HeldPrograms::Looped {
                programs: 1.0,
                ops_per_chunk: 3.0 * 64.0,
            },
            fanout: 1.0,
            in_flight: InFlight::Messages(4.0),
        }
    }
}
