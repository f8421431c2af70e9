//! `tree`: binomial trees over all participants, ⌈log2 n⌉ steps each way —
//! latency-optimal for small messages. Reduce climbs the tree to participant
//! 0, broadcast descends from it, all-reduce does both. The partner at level
//! k is `me XOR 2^k`, reached on logical channel k.

use super::primitives::{levels, me};
use crate::cost::{CostTerms, HeldPrograms, InFlight, log2_levels, participants};
use crate::kernels::Buffer;
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

pub struct Tree;

fn reduce_up(tl: &mut Tl, a: &KernelArgs, buf: &mut Buffer, me: usize) {
    let n = a.group.size();
    let all = buf.atoms(&[]);
    for k in 0..levels(n) {
        let bit = 1 << k;
        if me & bit != 0 {
            buf.send(tl, &all, QDir::Chan(k as u8));
            return;
        }
        if me + bit < n {
            for c in &all {
                buf.recv_combine(tl, a.job.op, c, QDir::Chan(k as u8), None);
            }
        }
    }
}

fn broadcast_down(tl: &mut Tl, a: &KernelArgs, buf: &mut Buffer, me: usize) {
    let n = a.group.size();
    let all = buf.atoms(&[]);
    for k in (0..levels(n)).rev() {
        let bit = 1 << k;
        if me % (2 * bit) == bit {
            for c in &all {
                buf.recv_replace(tl, c, QDir::Chan(k as u8), None);
            }
        } else if me.is_multiple_of(2 * bit) && me + bit < n {
            buf.send(tl, &all, QDir::Chan(k as u8));
        }
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let me = me(tl, &a.group);
    if a.group.size() == 1 {
        return;
    }
    let mut buf = Buffer::new(
        a.buffer(tl),
        a.job.elems,
        &[a.pieces(a.job.elems, levels(a.group.size()))],
    );
    let all = buf.atoms(&[]);
    match a.job.collective {
        Collective::Reduce => {
            buf.load(tl, &all);
            reduce_up(tl, a, &mut buf, me);
            if me == 0 {
                buf.store(tl, &all);
            }
        }
        Collective::Broadcast => {
            if me == 0 {
                buf.load(tl, &all);
            }
            broadcast_down(tl, a, &mut buf, me);
            if me != 0 {
                buf.store(tl, &all);
            }
        }
        _ => {
            buf.load(tl, &all);
            reduce_up(tl, a, &mut buf, me);
            broadcast_down(tl, a, &mut buf, me);
            buf.store(tl, &all);
        }
    }
}

impl Algorithm for Tree {
    fn name(&self) -> &'static str {
        "tree"
    }
    fn summary(&self) -> &'static str {
        "binomial trees: reduce to participant 0 and broadcast back, 2⌈log2 n⌉ steps"
    }
    fn every_pe(&self) -> bool {
        true
    }
    fn collectives(&self) -> &'static [Collective] {
        &[
            Collective::AllReduce,
            Collective::Reduce,
            Collective::Broadcast,
        ]
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let n = g.size();
        g.wire_each(|p| {
            (0..levels(n))
                .filter(|k| (p ^ (1 << k)) < n)
                .map(|k| q.entry(QDir::Chan(k as u8), g.pe(p ^ (1 << k)), QDir::Chan(k as u8)))
                .collect()
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // A binomial tree's p − 1 edges carry the buffer once each way: about
        // one send per participant and direction, forwarded level by level.
        // A reduce steps a level at a time; broadcasts are staggered by depth.
        let n = participants(g);
        let (sends, bytes_per_send) = if c == Collective::AllReduce {
            (2.0, bytes)
        } else {
            (1.0, bytes)
        };
        CostTerms {
            sends,
            bytes_per_send,
            stages: log2_levels(g) as usize,
            lockstep: if c == Collective::Reduce {
                n / n.log2().ceil().max(1.0)
            } else {
                1.0
            },
            register_pieces: 1.0,
            programs: HeldPrograms::Unrolled {
                programs: g.size() as f64,
            },
            fanout: 1.0,
            in_flight: InFlight::Sends(1.0),
        }
    }
}
