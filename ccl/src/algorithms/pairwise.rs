//! `pairwise`: all-to-all by direct exchange. Every participant has a queue
//! to every other one and sends its block `p + d` to `p + d` for every
//! distance `d` at once, piece round by piece round (distances `d` and
//! `n − d` in turn, so both ring directions carry data), receiving from
//! every peer in the same order: the network carries every flow together,
//! so the busiest links (the bisection) set the time rather than the
//! longest distance of each of `⌊n/2⌋` steps in turn (on 256 SIPs of one
//! cube at 64 MiB: torus 37% → 63% of the bound, mesh 49% → 89%).
//! Each participant sends `(n−1)/n` of its buffer: bandwidth-optimal,
//! latency `O(n)` (bruck is the latency-optimal one for small blocks).

use super::primitives::me;
use crate::cost::{CostTerms, HeldPrograms, InFlight, block_sends, participants};
use crate::kernels::{Atom, Buffer};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::kernel::{Index, Sym, Tile, Tl};
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

pub struct Pairwise;

/// Most participants: one logical channel per distance 1..n−1, and a
/// channel number is a u8.
pub const MAX_PARTICIPANTS: usize = 256;

/// The channel between `p` and `p + d`: `p` knows it as channel `d`, its
/// peer as channel `n − d` (the peer's distance back to `p`).
fn chan(d: usize) -> QDir {
    QDir::Chan(d as u8)
}

/// The atoms of block `me + d` (mod n).
fn block(buf: &Buffer, me: Sym, d: usize) -> Vec<Atom> {
    buf.atoms(&[Index::At(me + d)])
}

/// Every distance at once: each piece round loads the next round's pieces
/// (the HBM reads stay one round ahead of the sends: loading whole blocks
/// first left the links idle for the first S/HBM-rate), sends piece `c` of
/// block `me + d` on channel `d` for every `d`, stores the previous round's
/// pieces (received by then, so no store stalls a send), then receives
/// piece `c` of block `me − d` from channel `n − d`. Own block `me` stays
/// in place.
fn exchange(tl: &mut Tl, buf: &mut Buffer, me: Sym, n: usize) {
    let dists: Vec<usize> = (1..=n / 2)
        .flat_map(|d| if 2 * d == n { vec![d] } else { vec![d, n - d] })
        .collect();
    let sends: Vec<Vec<Atom>> = dists.iter().map(|&d| block(buf, me, d)).collect();
    let recvs: Vec<Vec<Atom>> = dists.iter().map(|&d| block(buf, me, n - d)).collect();
    let rounds = sends[0].len();
    let load_round = |buf: &mut Buffer, tl: &mut Tl, c: usize| {
        for s in &sends {
            buf.load(tl, std::slice::from_ref(&s[c]));
        }
    };
    load_round(buf, tl, 0);
    let mut got: Vec<(Atom, Tile)> = Vec::new();
    for c in 0..rounds {
        if c + 1 < rounds {
            load_round(buf, tl, c + 1);
        }
        for (k, &d) in dists.iter().enumerate() {
            tl.send(chan(d), buf.tile(&sends[k][c]));
        }
        for (a, x) in got.drain(..) {
            tl.store_part(&buf.part(&a), x);
        }
        for (k, &d) in dists.iter().enumerate() {
            let a = &recvs[k][c];
            got.push((a.clone(), tl.recv_part(chan(n - d), &buf.part(a))));
        }
    }
    for (a, x) in got {
        tl.store_part(&buf.part(&a), x);
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let n = a.group.size();
    let p = me(tl, &a.group);
    if n == 1 {
        return;
    }
    // The position is a parameter, so every participant traces the same
    // program.
    let me = tl.param(p as i64);
    let mut buf = Buffer::new(
        a.buffer(tl),
        a.job.elems,
        &[n, a.pieces(a.job.elems / n, 1)],
    );
    exchange(tl, &mut buf, me, n);
}

impl Algorithm for Pairwise {
    fn name(&self) -> &'static str {
        "pairwise"
    }
    fn summary(&self) -> &'static str {
        "all-to-all by direct exchange with every participant, every block in flight at once, both ring directions"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[Collective::AllToAll]
    }
    fn check_group(&self, g: &Group) -> Result<(), String> {
        let n = g.size();
        if n > MAX_PARTICIPANTS {
            return Err(format!(
                "a group of {n} participants: pairwise wires one logical channel per distance (QDir::Chan is a u8), so at most {MAX_PARTICIPANTS} participants; allowed: fewer SIPs or cubes, or algorithm bruck"
            ));
        }
        Ok(())
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let n = g.size();
        if !(2..=MAX_PARTICIPANTS).contains(&n) {
            return Vec::new();
        }
        g.wire_each(|p| {
            (1..n)
                .map(|d| q.entry(chan(d), g.pe((p + d) % n), chan(n - d)))
                .collect()
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // Every participant holds every block; all share one unrolled program.
        let (sends, bytes_per_send) = block_sends(g, c, bytes);
        CostTerms {
            sends,
            bytes_per_send,
            stages: 1,
            lockstep: participants(g),
            register_pieces: g.size() as f64 / 4.0,
            programs: HeldPrograms::Unrolled { programs: 1.0 },
            // Every block is in flight at once.
            fanout: (participants(g) - 1.0).max(1.0),
            in_flight: InFlight::Sends(sends),
        }
    }
}
