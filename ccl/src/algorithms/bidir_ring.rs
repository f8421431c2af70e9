//! `bidir_ring`: rings over Hamiltonian cycles of the participants, each
//! run both ways round at once. Every block is cut into one part per ring,
//! so every link of a cycle carries data in both directions: all-reduce,
//! reduce-scatter and all-gather take half the time of `ring`'s one-way
//! ring. On a square torus of side 3 or more with one participant per SIP
//! there are two edge-disjoint Hamiltonian cycles, four rings, and every SIP
//! link carries a ring each way. Broadcast and reduce are pipelined chains,
//! one per ring, cut into pieces by the pipeline depth (`chunks: auto`
//! chooses it from the size, the chain's length and the links).

use super::primitives::{cycle_wiring, me, ring_order};
use crate::cost::{CostTerms, HeldPrograms, InFlight, block_sends, participants};
use crate::kernels::{
    Buffer, Chain, ChainKind, Keep, Ring, RingJob, all_gather, reduce_scatter, run_chains,
};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_spec::spec::SipTopology;
use kernbench_systems::ipcq::Tables;
use std::sync::Arc;

pub struct BidirRing;

use super::primitives::{CYCLE_NEXT as NEXT, CYCLE_PREV as PREV};

/// Participant orders of the cycles the rings follow, each starting at
/// participant 0: on a square torus of side k ≥ 3 with one participant per
/// SIP, two edge-disjoint Hamiltonian cycles (below); otherwise `ring`'s order.
///
/// Every step of either cycle moves +x or +y, so x + y grows by one per
/// step; cycle 0 moves +x except on the anti-diagonal x + y ≡ k − 1, where
/// it moves +y, and cycle 1 does the opposite. Each SIP's +x and +y links
/// thus belong to exactly one cycle. Every k steps cycle 0 moves by
/// (−1, +1), so it first returns to its start after k² steps: it visits
/// every SIP (cycle 1 likewise, with x and y swapped).
pub fn cycles(g: &Group) -> Vec<Vec<usize>> {
    if !two_cycles(g) {
        return vec![ring_order(g)];
    }
    let k = g.grid.0 as usize;
    (0..2)
        .map(|c| {
            let (mut x, mut y) = (0, 0);
            (0..k * k)
                .map(|_| {
                    let at = g.participant((y * k + x) as u32, 0);
                    let diagonal = (x + y) % k == k - 1;
                    if diagonal == (c == 1) {
                        x = (x + 1) % k;
                    } else {
                        y = (y + 1) % k;
                    }
                    at
                })
                .collect()
        })
        .collect()
}

/// Whether the group is a square torus of side 3 or more with one
/// participant per SIP (where [`cycles`] finds two).
fn two_cycles(g: &Group) -> bool {
    let (w, h) = g.grid;
    let one_per_sip = g.cubes_per_sip() * g.pes == 1;
    g.topology == SipTopology::Torus2d && w == h && w >= 3 && one_per_sip
}

/// A cycle's participant order and its inverse (participant → position),
/// shared by the PEs of a launch.
struct CycleTable {
    order: Arc<[u32]>,
    position: Arc<[u32]>,
}

/// The cycles are computed once per launch, by the first PE traced.
fn cycle_tables(tl: &mut Tl, g: &Group) -> Vec<CycleTable> {
    let count = if two_cycles(g) { 2 } else { 1 };
    (0..count)
        .map(|c| {
            let order = tl.table(&format!("bidir cycle {c} order"), || {
                cycles(g)[c].iter().map(|&p| p as u32).collect()
            });
            let position = tl.table(&format!("bidir cycle {c} position"), || {
                let mut pos = vec![0u32; order.len()];
                for (k, &p) in order.iter().enumerate() {
                    pos[p as usize] = k as u32;
                }
                pos
            });
            CycleTable { order, position }
        })
        .collect()
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let n = a.group.size();
    let participant = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let tables = cycle_tables(tl, &a.group);
    let pos: Vec<usize> = tables
        .iter()
        .map(|t| t.position[participant] as usize)
        .collect();
    match a.job.collective {
        Collective::Broadcast => broadcast_chains(tl, a, &pos),
        Collective::Reduce => reduce_chains(tl, a, &pos),
        _ => rings(tl, a, &tables, &pos),
    }
}

/// Reduce-scatter, all-gather or both over every cycle both ways round.
/// Ring block `k` of a ring is the data block of the participant its table
/// names: for all-gather the one at ring position `k` (each starts from its
/// own block), for reduce-scatter the one at position `k − 1` (reduce-scatter
/// leaves position `k` with ring block `k + 1`, and each must end with its
/// own). Ring `2c + d` (cycle c, d = 1 the reverse way) carries part `2c + d`
/// of every block.
fn rings(tl: &mut Tl, a: &KernelArgs, tables: &[CycleTable], pos: &[usize]) {
    let (n, job) = (a.group.size(), a.job);
    let shift = usize::from(job.collective == Collective::ReduceScatter);
    let mut jobs = Vec::new();
    for (c, CycleTable { order, .. }) in tables.iter().enumerate() {
        let forward = Ring {
            n,
            me: tl.param(pos[c] as i64),
            next: NEXT[c],
            prev: PREV[c],
        };
        for (d, ring) in [forward, forward.reversed()].into_iter().enumerate() {
            let name = format!("bidir cycle {c} way {d} shift {shift}");
            let table = tl.table(&name, || {
                (0..n)
                    .map(|k| {
                        let at = (k + n - shift) % n;
                        order[if d == 0 { at } else { (n - at) % n }]
                    })
                    .collect()
            });
            jobs.push(RingJob {
                ring,
                prefix: Vec::new(),
                order: Some(table),
                suffix: vec![(2 * c + d).into()],
            });
        }
    }
    let parts = jobs.len();
    let pieces = a.pieces(job.elems / (parts * n), 1);
    let mut buf = Buffer::new(a.buffer(tl), job.elems, &[n, parts, pieces]);
    let keep = |own| Keep {
        own,
        received: true,
        reuse: false,
    };
    if job.collective == Collective::AllGather {
        let own: Vec<_> = jobs.iter().map(|j| j.ring.me).collect();
        for j in &jobs {
            buf.load(tl, &buf.atoms(&j.block(j.ring.me)));
        }
        all_gather(tl, &mut buf, &jobs, &own, keep(false));
        return;
    }
    reduce_scatter(tl, job.op, &mut buf, &jobs);
    if job.collective == Collective::ReduceScatter {
        for j in &jobs {
            buf.store(tl, &buf.atoms(&j.block(j.owned())));
        }
        return;
    }
    let owned: Vec<_> = jobs.iter().map(|j| j.owned()).collect();
    all_gather(tl, &mut buf, &jobs, &owned, keep(true));
}

/// Broadcast by chains that meet: part c of the buffer (one per cycle)
/// leaves the root both ways round cycle c at once, east in piece order and
/// west from its last piece back. Participant k takes the first m_k pieces from
/// the east-going chain and the rest from the west-going one, m_k chosen so
/// both streams end at k together: with piece i reaching k at
/// offset(k) + i, m_k = (P + offset(n − k) − offset(k)) / 2, and every
/// participant finishes about S / 2B + n·hop / 2 after the start, where fixed
/// halves, one per way, take S / 2B + (n − 1)·hop (docs/model.md
/// §Pipelining). A participant passes on east only what its east neighbour
/// takes from that side (m_{k+1} ≤ m_k, a prefix of its stream) and west
/// likewise, so no piece crosses a link twice but the root's: it sends the
/// (n − 2)·hop-piece-times of pieces in the middle both ways.
fn broadcast_chains(tl: &mut Tl, a: &KernelArgs, pos: &[usize]) {
    let (n, elems) = (a.group.size(), a.job.elems);
    let parts = pos.len();
    // The piece size of one-way halves, twice the pieces (a buffer smaller
    // than the parts leaves some empty: one piece).
    let pieces = (2 * a.crossing_pieces(elems / (2 * parts), n - 1))
        .min(elems / parts)
        .max(1);
    let buf = Buffer::new(a.buffer(tl), elems, &[parts, pieces]);
    let at = |hops| a.chain_offset(elems / (parts * pieces), hops);
    // Pieces participant k takes from the east-going chain (the root has all):
    // its two streams end at the same step as it takes them. The offsets
    // round the hop up to whole piece times; on 256 SIPs of a ring the
    // unrounded estimate, which leaves out the NoC path inside each SIP,
    // met later (85% of the bound against 89%).
    let east = |k: usize| match k {
        0 => pieces,
        k if k >= n => 0,
        k => {
            let m = (pieces + at(n - k)).saturating_sub(at(k)) / 2;
            m.min(pieces)
        }
    };
    let mut all = Vec::new();
    for (c, &p) in pos.iter().enumerate() {
        let (next, prev) = (NEXT[c], PREV[c]);
        let root = p == 0;
        // What this participant's neighbours take from its side; the root sends
        // exactly that, the others take their own share.
        let east_forward = east(p + 1);
        let west_forward = pieces - east((p + n - 1) % n);
        let (east_take, west_take) = if root {
            (east_forward, west_forward)
        } else {
            (east(p), pieces - east(p))
        };
        let from = |dir| (!root).then_some(dir);
        all.push(Chain {
            take: east_take,
            forward: east_forward,
            ..Chain::whole(
                vec![c.into()],
                from(prev),
                (p != n - 1).then_some(next),
                at(p),
                pieces,
            )
        });
        all.push(Chain {
            take: west_take,
            forward: west_forward,
            reversed: true,
            ..Chain::whole(
                vec![c.into()],
                from(next),
                (p != 1).then_some(prev),
                at((n - p) % n),
                pieces,
            )
        });
    }
    run_chains(tl, &buf, ChainKind::Broadcast, &all, pieces);
}

/// Reduce by pipelined chains, two per cycle, one per part of the buffer,
/// each all the way round: position 0 (the root) heads both with its own
/// pieces, every other participant combines its own in and forwards, and the
/// root receives the result from its other neighbour and stores it. So
/// the root's HBM reads its input while the pipeline fills and writes the
/// result after, instead of doing both once the chains reach it (on 256
/// SIPs of a ring at 64 MiB: 76% → 87% of the bound, the HBM port). Each
/// participant takes the pieces of all chains in the order they reach it.
fn reduce_chains(tl: &mut Tl, a: &KernelArgs, pos: &[usize]) {
    let (n, elems) = (a.group.size(), a.job.elems);
    let parts = 2 * pos.len();
    let pieces = a.crossing_pieces(elems / parts, n);
    let buf = Buffer::new(a.buffer(tl), elems, &[parts, pieces]);
    let at = |hops| a.chain_offset(elems / (parts * pieces), hops);
    let chain = |part: usize, from, to, offset, adds_own| Chain {
        adds_own,
        ..Chain::whole(vec![part.into()], from, to, offset, pieces)
    };
    let mut all = Vec::new();
    for (c, &p) in pos.iter().enumerate() {
        let (next, prev) = (NEXT[c], PREV[c]);
        let (east, west) = (2 * c, 2 * c + 1);
        if p == 0 {
            all.push(chain(east, None, Some(next), 0, true));
            all.push(chain(west, None, Some(prev), 0, true));
            all.push(chain(east, Some(prev), None, at(n), false));
            all.push(chain(west, Some(next), None, at(n), false));
        } else {
            all.push(chain(east, Some(prev), Some(next), at(p), true));
            all.push(chain(west, Some(next), Some(prev), at(n - p), true));
        }
    }
    run_chains(tl, &buf, ChainKind::Reduce(a.job.op), &all, pieces);
}

impl Algorithm for BidirRing {
    fn name(&self) -> &'static str {
        "bidir_ring"
    }
    fn summary(&self) -> &'static str {
        "rings both ways round over Hamiltonian cycles (two edge-disjoint ones on a square torus): every cycle link busy both ways; pipelined chains for broadcast and reduce"
    }
    fn every_pe(&self) -> bool {
        true
    }
    fn collectives(&self) -> &'static [Collective] {
        &Collective::RING
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        cycle_wiring(g, q, &cycles(g))
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // Its chains (broadcast, reduce) are staggered by their position.
        let (sends, bytes_per_send) = block_sends(g, c, bytes);
        CostTerms {
            sends,
            bytes_per_send,
            stages: 1,
            lockstep: if matches!(c, Collective::Broadcast | Collective::Reduce) {
                1.0
            } else {
                participants(g)
            },
            register_pieces: 1.0,
            programs: HeldPrograms::Unrolled {
                programs: g.size() as f64,
            },
            fanout: 1.0,
            in_flight: InFlight::Messages(8.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernbench_spec::spec::System;
    use std::collections::HashSet;

    fn torus(k: u32) -> Group {
        let mut sys = System::embedded_default();
        let s = &mut sys.spec;
        s.system.sips.count = k * k;
        s.system.sips.topology = SipTopology::Torus2d;
        (s.system.sips.w, s.system.sips.h) = (Some(k), Some(k));
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (1, 1);
        Group {
            grid: (k, k),
            ..Group::new(&sys)
        }
    }

    /// Both cycles visit every SIP once, every hop joins torus neighbours,
    /// and no link (either way) is in both.
    #[test]
    fn a_square_torus_has_two_edge_disjoint_hamiltonian_cycles() {
        for k in [3u32, 4, 5, 16] {
            let g = torus(k);
            let all = cycles(&g);
            assert_eq!(all.len(), 2, "{k}x{k}");
            let mut used = HashSet::new();
            for c in &all {
                let mut seen = c.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..(k * k) as usize).collect::<Vec<_>>(), "{k}x{k}");
                for i in 0..c.len() {
                    let (a, b) = (c[i] as u32, c[(i + 1) % c.len()] as u32);
                    let (dx, dy) = ((a % k).abs_diff(b % k), (a / k).abs_diff(b / k));
                    let step = |d: u32| d == 1 || d == k - 1;
                    assert!((dx == 0 && step(dy)) || (dy == 0 && step(dx)), "{a} -> {b}");
                    assert!(
                        used.insert((a.min(b), a.max(b))),
                        "{k}x{k}: link {a}-{b} twice"
                    );
                }
            }
        }
        // A 2x2 torus or a ring keeps the one cycle of `ring`.
        assert_eq!(cycles(&torus(2)).len(), 1);
    }
}
