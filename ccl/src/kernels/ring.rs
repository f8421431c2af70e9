//! Ring phases: the ring order of a cube grid ([`grid_cycle`]), a ring
//! ([`Ring`]) and the ring jobs over blocks of a buffer ([`RingJob`]), and the
//! pipelined ring [`reduce_scatter`] and [`all_gather`] of several rings at
//! once.

use super::buffer::{Atom, Buffer, combine};
use crate::ReduceOp;
use kernbench_runtime::kernel::{Index, Sym, Tile, Tl};
use kernbench_systems::program::QDir;
use std::sync::Arc;

/// The ids of a w×h grid (row-major) in ring order: a Hamiltonian cycle when
/// one side is even (every ring hop joins grid neighbours), otherwise a row
/// snake whose closing hop crosses the grid. Starts at id 0.
pub fn grid_cycle(w: u32, h: u32) -> Vec<u32> {
    let cycle = |w: u32, h: u32, id: &dyn Fn(u32, u32) -> u32| -> Vec<u32> {
        // Row 0 west→east, rows 1.. snake over columns 1.., back up column 0.
        let mut v: Vec<u32> = (0..w).map(|x| id(x, 0)).collect();
        for y in 1..h {
            let xs: Vec<u32> = if y % 2 == 1 {
                (1..w).rev().collect()
            } else {
                (1..w).collect()
            };
            v.extend(xs.into_iter().map(|x| id(x, y)));
        }
        v.extend((1..h).rev().map(|y| id(0, y)));
        v
    };
    if w >= 2 && h >= 2 && h.is_multiple_of(2) {
        cycle(w, h, &|x, y| y * w + x)
    } else if w >= 2 && h >= 2 && w.is_multiple_of(2) {
        cycle(h, w, &|x, y| x * w + y)
    } else {
        (0..h)
            .flat_map(|y| {
                (0..w).map(move |x| {
                    if y % 2 == 0 {
                        y * w + x
                    } else {
                        y * w + (w - 1 - x)
                    }
                })
            })
            .collect()
    }
}

/// A ring of `n` participants; this one is at `me` (a per-PE parameter); it
/// sends on `next` and receives on `prev`.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    pub n: usize,
    pub me: Sym,
    pub next: QDir,
    pub prev: QDir,
}

impl Ring {
    /// The same participants walked the other way round.
    pub fn reversed(self) -> Ring {
        Ring {
            n: self.n,
            me: -self.me + self.n,
            next: self.prev,
            prev: self.next,
        }
    }

    /// This participant's position on the PE being traced.
    pub fn position(&self) -> usize {
        Index::At(self.me)
            .value(self.n)
            .expect("a ring position is known on the traced PE")
    }
}

/// A ring collective over blocks of a buffer: ring block `k` is the buffer
/// block `prefix ++ [k] ++ suffix`, or `prefix ++ [order[k]] ++ suffix` with
/// an order table (a suffix takes one part of every block, e.g. the half
/// one direction of a bidirectional ring carries).
#[derive(Debug, Clone)]
pub struct RingJob {
    pub ring: Ring,
    pub prefix: Vec<Index>,
    pub order: Option<Arc<[u32]>>,
    pub suffix: Vec<Index>,
}

impl RingJob {
    /// The buffer block of ring block `k`.
    pub fn block(&self, k: Sym) -> Vec<Index> {
        let mut b = self.prefix.clone();
        b.push(match &self.order {
            None => Index::At(k),
            Some(t) => Index::Table(t.clone(), k),
        });
        b.extend(self.suffix.iter().cloned());
        b
    }

    /// The ring block this participant holds reduced after [`reduce_scatter`].
    pub fn owned(&self) -> Sym {
        self.ring.me + 1usize
    }

    /// The ring block this participant reduces at step `s` of
    /// [`reduce_scatter`] (and receives at step `s` of an [`all_gather`] from
    /// `own`): `own − s − 1`.
    fn at_step(&self, own: Sym, s: Sym) -> Sym {
        own - s + (self.ring.n - 1)
    }
}

/// The atoms of each job's block `block(j)`, visited round-robin: atom 0 of
/// every job, then atom 1, and so on. `visit` gets the job, its number in
/// `jobs`, the atom's number in its block and the atom.
fn interleave<'a>(
    buf: &Buffer,
    jobs: &[&'a RingJob],
    block: impl Fn(&RingJob) -> Vec<Index>,
    mut visit: impl FnMut(&'a RingJob, usize, usize, &Atom),
) {
    let blocks: Vec<Vec<Atom>> = jobs.iter().map(|j| buf.atoms(&block(j))).collect();
    let longest = blocks.iter().map(|b| b.len()).max().unwrap_or(0);
    for i in 0..longest {
        for (k, (j, b)) in jobs.iter().zip(&blocks).enumerate() {
            if let Some(a) = b.get(i) {
                visit(j, k, i, a);
            }
        }
    }
}

/// Steps `0 .. n − 2` of a ring pass (all but the last) run as one loop when
/// every ring has the same size and there are at least two such steps.
fn loop_steps(rings: &[&RingJob]) -> Option<usize> {
    let n = rings.first()?.ring.n;
    (rings.iter().all(|j| j.ring.n == n) && n >= 4).then_some(n - 2)
}

/// Ring reduce-scatter (n − 1 steps) of several rings at once. Within a step
/// the rings advance atom by atom in turn, and a participant forwards an atom
/// as soon as it is reduced, so rings in both directions stream together and
/// consecutive atoms pipeline with few slots. Blocks are loaded one step before
/// they are needed, so HBM streams while the ring runs. Afterwards participant
/// `me` of each job holds block `(me + 1) mod n` reduced.
///
/// When the blocks all come from memory, the steps before the last are one
/// loop whose carried tiles are the block loaded for the next step.
pub fn reduce_scatter(tl: &mut Tl, op: ReduceOp, buf: &mut Buffer, jobs: &[RingJob]) {
    let rings: Vec<&RingJob> = jobs.iter().filter(|j| j.ring.n > 1).collect();
    let me = |j: &RingJob| j.ring.me;
    for j in &rings {
        buf.ensure(tl, &buf.atoms(&j.block(me(j))));
    }
    interleave(
        buf,
        &rings,
        |j| j.block(me(j)),
        |j, _, _, a| tl.send(j.ring.next, buf.tile(a)),
    );
    let first: Vec<Vec<Atom>> = rings
        .iter()
        .map(|j| buf.atoms(&j.block(j.at_step(me(j), Sym::from(0usize)))))
        .collect();
    for atoms in &first {
        buf.ensure(tl, atoms);
    }
    let steps = rings.iter().map(|j| j.ring.n - 1).max().unwrap_or(0);
    let own_atoms: usize = rings.iter().map(|j| buf.atoms(&j.block(me(j))).len()).sum();
    let mut s0 = 0;
    if let Some(count) = loop_steps(&rings)
        && buf.held() == own_atoms + first.iter().map(Vec::len).sum::<usize>()
    {
        let carried: Vec<Tile> = first.iter().flatten().map(|a| buf.tile(a)).collect();
        let per_block = first[0].len();
        let last = tl.repeat(count, &carried, |tl, s, cur| {
            let mut next = Vec::with_capacity(cur.len());
            for j in &rings {
                for a in buf.atoms(&j.block(j.at_step(me(j), s + 1usize))) {
                    next.push(tl.load_part(&buf.part(&a)));
                }
            }
            interleave(
                buf,
                &rings,
                |j| j.block(j.at_step(me(j), s)),
                |j, k, i, a| {
                    let x = tl.recv_part(j.ring.prev, &buf.part(a));
                    let t = combine(tl, op, cur[k * per_block + i], x);
                    tl.send(j.ring.next, t);
                },
            );
            next
        });
        let at_last = Sym::from(count);
        for (k, j) in rings.iter().enumerate() {
            let atoms = buf.atoms(&j.block(j.at_step(me(j), at_last)));
            for (i, a) in atoms.iter().enumerate() {
                buf.set(a, last[k * per_block + i]);
            }
        }
        s0 = count;
    }
    for s in s0..steps {
        let s_ = Sym::from(s);
        for j in rings.iter().filter(|j| s + 2 < j.ring.n) {
            buf.ensure(tl, &buf.atoms(&j.block(j.at_step(me(j), s_ + 1usize))));
        }
        let live: Vec<&RingJob> = rings.iter().copied().filter(|j| s + 1 < j.ring.n).collect();
        let atoms_of = |j: &RingJob| j.block(j.at_step(me(j), s_));
        let mut visits = Vec::new();
        interleave(buf, &live, atoms_of, |j, _, _, a| {
            visits.push((j, a.clone()))
        });
        for (j, a) in visits {
            let forward = (s + 2 < j.ring.n).then_some(j.ring.next);
            buf.recv_combine(tl, op, &a, j.ring.prev, forward);
        }
    }
}

/// What [`all_gather`] stores to HBM as soon as it is final, and whether the
/// kernel reads the received tiles from registers afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// The block this participant starts with.
    pub own: bool,
    /// Blocks as they arrive.
    pub received: bool,
    /// Received tiles stay in registers for later steps of the kernel (so
    /// the steps are traced one by one rather than as a loop).
    pub reuse: bool,
}

/// Ring all-gather (n − 1 steps): participant `me` of job `i` starts with block
/// `own[i]` and ends with all blocks; rings advance atom by atom in turn.
/// `keep` says which atoms to store as soon as they are final, so stores
/// overlap the rest of the ring.
pub fn all_gather(tl: &mut Tl, buf: &mut Buffer, jobs: &[RingJob], own: &[Sym], keep: Keep) {
    let all: Vec<(&RingJob, Sym)> = jobs.iter().zip(own.iter().copied()).collect();
    // The own block is needed if it is sent or stored.
    for (j, o) in all.iter().filter(|(j, _)| j.ring.n > 1 || keep.own) {
        buf.ensure(tl, &buf.atoms(&j.block(*o)));
    }
    let rings: Vec<(&RingJob, Sym)> = all.iter().copied().filter(|(j, _)| j.ring.n > 1).collect();
    let ring_jobs: Vec<&RingJob> = rings.iter().map(|(j, _)| *j).collect();
    let own_of = |j: &RingJob| {
        rings
            .iter()
            .find(|(x, _)| std::ptr::eq(*x, j))
            .expect("job of this call")
            .1
    };
    interleave(
        buf,
        &ring_jobs,
        |j| j.block(own_of(j)),
        |j, _, _, a| tl.send(j.ring.next, buf.tile(a)),
    );
    if keep.own {
        for (j, o) in &all {
            buf.store(tl, &buf.atoms(&j.block(*o)));
        }
    }
    let steps = ring_jobs.iter().map(|j| j.ring.n - 1).max().unwrap_or(0);
    let mut s0 = 0;
    if let Some(count) = loop_steps(&ring_jobs)
        && !keep.reuse
    {
        tl.repeat(count, &[], |tl, s, _| {
            interleave(
                buf,
                &ring_jobs,
                |j| j.block(j.at_step(own_of(j), s)),
                |j, _, _, a| {
                    let part = buf.part(a);
                    let x = tl.recv_part(j.ring.prev, &part);
                    tl.send(j.ring.next, x);
                    if keep.received {
                        tl.store_part(&part, x);
                    }
                },
            );
            Vec::new()
        });
        s0 = count;
    }
    for s in s0..steps {
        let live: Vec<&RingJob> = ring_jobs
            .iter()
            .copied()
            .filter(|j| s + 1 < j.ring.n)
            .collect();
        let mut visits = Vec::new();
        interleave(
            buf,
            &live,
            |j| j.block(j.at_step(own_of(j), Sym::from(s))),
            |j, _, _, a| visits.push((j, a.clone())),
        );
        for (j, a) in visits {
            let forward = (s + 2 < j.ring.n).then_some(j.ring.next);
            buf.recv_replace(tl, &a, j.ring.prev, forward);
            if keep.received {
                buf.store(tl, std::slice::from_ref(&a));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cube once; with an even side, consecutive cubes (cyclically) are
    /// mesh neighbours.
    #[test]
    fn cube_ring_is_a_hamiltonian_cycle_when_a_side_is_even() {
        for (w, h) in [
            (4, 4),
            (2, 2),
            (3, 2),
            (2, 3),
            (3, 5),
            (1, 1),
            (5, 1),
            (4, 3),
        ] {
            let r = grid_cycle(w, h);
            let mut seen = r.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..w * h).collect::<Vec<_>>(), "{w}x{h}");
            if (w % 2 == 0 || h % 2 == 0) && w >= 2 && h >= 2 {
                for i in 0..r.len() {
                    let (a, b) = (r[i], r[(i + 1) % r.len()]);
                    let d = (a % w).abs_diff(b % w) + (a / w).abs_diff(b / w);
                    assert_eq!(d, 1, "{w}x{h}: {a} -> {b} in {r:?}");
                }
            }
        }
    }
}
