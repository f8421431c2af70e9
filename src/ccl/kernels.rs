//! Building blocks of collective kernels, written against the tracer.
//!
//! A participant's buffer is cut into *atoms* by a list of radices: the
//! buffer splits into `radices[0]` blocks, each of those into `radices[1]`,
//! and so on; the last radix is usually the pipeline depth (`chunks`). Every
//! block of every level is then a contiguous run of atoms, and every atom is
//! one tile, so hierarchical algorithms never need to slice a tile.

use super::ReduceOp;
use crate::kernel::{Addr, DType, Tile, Tl};
use kernbench_systems::program::QDir;
use std::ops::Range;

/// `n` elements in `parts` contiguous blocks, the first `n % parts` one larger:
/// (offset, length) pairs.
pub fn split(n: usize, parts: usize) -> Vec<(usize, usize)> {
    let (q, r) = (n / parts, n % parts);
    let mut off = 0;
    (0..parts)
        .map(|i| {
            let len = q + usize::from(i < r);
            off += len;
            (off - len, len)
        })
        .collect()
}

/// This participant's buffer (HBM offset 0), cut into atoms.
pub struct Buffer {
    radices: Vec<usize>,
    /// (offset, length) in elements, per atom.
    pub atoms: Vec<(usize, usize)>,
    pub tiles: Vec<Option<Tile>>,
}

impl Buffer {
    pub fn new(elems: usize, radices: &[usize]) -> Self {
        let mut atoms = vec![(0, elems)];
        for &r in radices {
            atoms = atoms
                .iter()
                .flat_map(|&(off, len)| split(len, r).into_iter().map(move |(o, l)| (off + o, l)))
                .collect();
        }
        let tiles = vec![None; atoms.len()];
        Self {
            radices: radices.to_vec(),
            atoms,
            tiles,
        }
    }

    /// Atoms whose leading indices are `prefix`.
    pub fn range(&self, prefix: &[usize]) -> Range<usize> {
        let mut start = 0;
        let mut size: usize = self.radices.iter().product();
        for (level, &i) in prefix.iter().enumerate() {
            size /= self.radices[level];
            start += i * size;
        }
        start..start + size
    }

    /// Loads the atoms of `r` from HBM.
    pub fn load(&mut self, tl: &mut Tl, r: Range<usize>) {
        for a in r {
            let (off, len) = self.atoms[a];
            self.tiles[a] = Some(tl.load(Addr::hbm(off as u64 * 2), len));
        }
    }

    /// Loads the atoms of `r` that are not held yet, in order.
    pub fn ensure(&mut self, tl: &mut Tl, r: Range<usize>) {
        for a in r {
            if self.tiles[a].is_none() {
                self.load(tl, a..a + 1);
            }
        }
    }

    /// Stores the atoms of `r` to HBM.
    pub fn store(&mut self, tl: &mut Tl, r: Range<usize>) {
        for a in r {
            let t = self.tile(a);
            tl.store(Addr::hbm(self.atoms[a].0 as u64 * 2), t);
        }
    }

    pub fn tile(&self, a: usize) -> Tile {
        self.tiles[a].expect("the kernel loaded or received this atom before using it")
    }

    pub fn len(&self, a: usize) -> usize {
        self.atoms[a].1
    }

    pub fn is_empty(&self) -> bool {
        self.atoms.is_empty()
    }

    /// Sends the atoms of `r` on `dir`.
    pub fn send(&self, tl: &mut Tl, r: Range<usize>, dir: QDir) {
        for a in r {
            tl.send(dir, self.tile(a));
        }
    }

    /// Receives atom `a` on `from`, combines it in, forwards the result on `to`.
    pub fn recv_combine(
        &mut self,
        tl: &mut Tl,
        op: ReduceOp,
        a: usize,
        from: QDir,
        to: Option<QDir>,
    ) {
        let x = tl.recv(from, &[self.len(a)], DType::F16);
        let t = combine(tl, op, self.tile(a), x);
        self.tiles[a] = Some(t);
        if let Some(d) = to {
            tl.send(d, t);
        }
    }

    /// Receives atom `a` on `from` (replacing it) and forwards it on `to`.
    pub fn recv_replace(&mut self, tl: &mut Tl, a: usize, from: QDir, to: Option<QDir>) {
        let x = tl.recv(from, &[self.len(a)], DType::F16);
        self.tiles[a] = Some(x);
        if let Some(d) = to {
            tl.send(d, x);
        }
    }
}

/// `a ∘ b` for the reduction.
pub fn combine(tl: &mut Tl, op: ReduceOp, a: Tile, b: Tile) -> Tile {
    match op {
        ReduceOp::Sum => tl.add(a, b),
        ReduceOp::Max => tl.max(a, b),
        ReduceOp::Min => tl.min(a, b),
    }
}

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

/// A ring of `n` members; this one is at `me`; it sends on `next` and receives on `prev`.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    pub n: usize,
    pub me: usize,
    pub next: QDir,
    pub prev: QDir,
}

impl Ring {
    /// The same members walked the other way round.
    pub fn reversed(self) -> Ring {
        Ring {
            n: self.n,
            me: (self.n - self.me) % self.n,
            next: self.prev,
            prev: self.next,
        }
    }
}

/// A ring collective over blocks of a buffer: `blocks[b]` are block b's atoms.
#[derive(Debug, Clone)]
pub struct RingJob {
    pub ring: Ring,
    pub blocks: Vec<Range<usize>>,
}

impl RingJob {
    /// The block this member holds reduced after [`reduce_scatter`].
    pub fn owned(&self) -> usize {
        (self.ring.me + 1) % self.ring.n
    }
}

/// Ring reduce-scatter (n − 1 steps) of several rings at once. Within a step
/// the rings advance atom by atom in turn, and a member forwards an atom as
/// soon as it is reduced, so rings in both directions stream together and
/// consecutive atoms pipeline with few slots. Blocks are loaded one step
/// before they are needed, so HBM streams while the ring runs. Afterwards
/// member `me` of each job holds block `(me + 1) mod n` reduced.
pub fn reduce_scatter(tl: &mut Tl, op: ReduceOp, buf: &mut Buffer, jobs: &[RingJob]) {
    let block_at = |j: &RingJob, s: usize| (j.ring.me + j.ring.n - s - 1) % j.ring.n;
    let rings: Vec<&RingJob> = jobs.iter().filter(|j| j.ring.n > 1).collect();
    for j in &rings {
        buf.ensure(tl, j.blocks[j.ring.me].clone());
    }
    interleave(
        &rings,
        |j| j.blocks[j.ring.me].clone(),
        |j, a| tl.send(j.ring.next, buf.tile(a)),
    );
    for j in &rings {
        buf.ensure(tl, j.blocks[block_at(j, 0)].clone());
    }
    let steps = rings.iter().map(|j| j.ring.n - 1).max().unwrap_or(0);
    for s in 0..steps {
        for j in rings.iter().filter(|j| s + 2 < j.ring.n) {
            buf.ensure(tl, j.blocks[block_at(j, s + 1)].clone());
        }
        let live: Vec<&RingJob> = rings.iter().copied().filter(|j| s + 1 < j.ring.n).collect();
        interleave(
            &live,
            |j| j.blocks[block_at(j, s)].clone(),
            |j, a| {
                let forward = (s + 2 < j.ring.n).then_some(j.ring.next);
                buf.recv_combine(tl, op, a, j.ring.prev, forward);
            },
        );
    }
}

/// Visits the atoms of each job's block round-robin: atom 0 of every job,
/// then atom 1, and so on.
fn interleave<'a>(
    jobs: &[&'a RingJob],
    block: impl Fn(&RingJob) -> Range<usize>,
    mut visit: impl FnMut(&'a RingJob, usize),
) {
    let blocks: Vec<Range<usize>> = jobs.iter().map(|j| block(j)).collect();
    let longest = blocks.iter().map(|b| b.len()).max().unwrap_or(0);
    for i in 0..longest {
        for (j, b) in jobs.iter().zip(&blocks) {
            if i < b.len() {
                visit(j, b.start + i);
            }
        }
    }
}

/// What [`all_gather`] stores to HBM as soon as it is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// The block this member starts with.
    pub own: bool,
    /// Blocks as they arrive.
    pub received: bool,
}

/// Ring all-gather (n − 1 steps): member `me` of job `i` starts with block
/// `own[i]` and ends with all blocks; rings advance atom by atom in turn.
/// `keep` says which atoms to store as soon as they are final, so stores
/// overlap the rest of the ring.
pub fn all_gather(tl: &mut Tl, buf: &mut Buffer, jobs: &[RingJob], own: &[usize], keep: Keep) {
    let owned = |j: &RingJob| {
        own[jobs
            .iter()
            .position(|x| std::ptr::eq(x, j))
            .expect("job of this call")]
    };
    let all: Vec<&RingJob> = jobs.iter().collect();
    for j in &all {
        buf.ensure(tl, j.blocks[owned(j)].clone());
    }
    let rings: Vec<&RingJob> = all.iter().copied().filter(|j| j.ring.n > 1).collect();
    interleave(
        &rings,
        |j| j.blocks[owned(j)].clone(),
        |j, a| tl.send(j.ring.next, buf.tile(a)),
    );
    if keep.own {
        for j in &all {
            buf.store(tl, j.blocks[owned(j)].clone());
        }
    }
    let steps = rings.iter().map(|j| j.ring.n - 1).max().unwrap_or(0);
    for s in 0..steps {
        let live: Vec<&RingJob> = rings.iter().copied().filter(|j| s + 1 < j.ring.n).collect();
        interleave(
            &live,
            |j| j.blocks[(owned(j) + j.ring.n - s - 1) % j.ring.n].clone(),
            |j, a| {
                let forward = (s + 2 < j.ring.n).then_some(j.ring.next);
                buf.recv_replace(tl, a, j.ring.prev, forward);
                if keep.received {
                    buf.store(tl, a..a + 1);
                }
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_exactly_with_larger_blocks_first() {
        assert_eq!(split(10, 4), vec![(0, 3), (3, 3), (6, 2), (8, 2)]);
        assert_eq!(split(2, 4), vec![(0, 1), (1, 1), (2, 0), (2, 0)]);
        assert_eq!(split(0, 2), vec![(0, 0), (0, 0)]);
    }

    #[test]
    fn nested_atoms_make_contiguous_blocks() {
        let b = Buffer::new(100, &[2, 3, 2]);
        assert_eq!(b.atoms.len(), 12);
        assert_eq!(b.range(&[1]), 6..12);
        assert_eq!(b.range(&[1, 2]), 10..12);
        assert_eq!(b.range(&[]), 0..12);
        // Atoms tile the buffer in order.
        let mut next = 0;
        for &(off, len) in &b.atoms {
            assert_eq!(off, next);
            next += len;
        }
        assert_eq!(next, 100);
        assert_eq!(b.atoms[b.range(&[1]).start].0, 50);
    }

    /// Every cube once; with an even side, consecutive cubes (cyclically) are mesh neighbours.
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
