//! `pairwise`: all-to-all by direct exchange. Every participant has a queue
//! to every other one; in step `d` it sends its block `p + d` to `p + d` and
//! its block `p − d` to `p − d`, and receives from both, so the two ring
//! directions (distance `d` and `n − d`) carry data at once. `⌊n/2⌋` steps,
//! each participant sends `(n−1)/n` of its buffer: bandwidth-optimal,
//! latency `O(n)` (bruck is the latency-optimal one for small blocks).

use super::ring::me;
use crate::ccl::kernels::{Atom, Buffer};
use crate::ccl::{Algorithm, Collective, Group, KernelArgs};
use crate::kernel::wiring::QueueConfig;
use crate::kernel::{Index, Sym, Tile, Tl};
use kernbench_systems::ipcq::Entry;
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

/// One step: for each distance `d` of `dists`, send block `me + d` on
/// channel `d` and receive block `me − d` from channel `n − d`, piece by
/// piece in turn (every send and receive is posted before the first store
/// waits, so credits always flow); then store the received pieces.
fn step(tl: &mut Tl, buf: &Buffer, me: Sym, n: usize, dists: &[usize]) {
    let sends: Vec<Vec<Atom>> = dists.iter().map(|&d| block(buf, me, d)).collect();
    let recvs: Vec<Vec<Atom>> = dists.iter().map(|&d| block(buf, me, n - d)).collect();
    let mut got: Vec<(Atom, Tile)> = Vec::new();
    for c in 0..sends[0].len() {
        for (k, &d) in dists.iter().enumerate() {
            tl.send(chan(d), buf.tile(&sends[k][c]));
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
    // The position is a parameter, so every participant traces the same program.
    let me = tl.param(p as i64);
    let mut buf = Buffer::new(
        a.buffer(tl),
        a.job.elems,
        &[n, a.pieces(a.job.elems / n, 1)],
    );
    // Own block p stays in place; every other one is sent.
    for d in 1..n {
        buf.load(tl, &block(&buf, me, d));
    }
    for d in 1..=n / 2 {
        let dists = if 2 * d == n { vec![d] } else { vec![d, n - d] };
        step(tl, &buf, me, n, &dists);
    }
}

impl Algorithm for Pairwise {
    fn name(&self) -> &'static str {
        "pairwise"
    }
    fn summary(&self) -> &'static str {
        "all-to-all by direct exchange with every participant, both ring directions per step, ⌊n/2⌋ steps"
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
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Vec<(u32, Vec<Entry>)> {
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
}
