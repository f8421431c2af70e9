//! Building blocks of collective kernels, written against the tracer.
//!
//! A participant's buffer is cut into *atoms* by a list of radices: the
//! buffer splits into `radices[0]` blocks, each of those into `radices[1]`,
//! and so on; the last radix is usually the pipeline depth (`chunks`). Every
//! block of every level is then a contiguous run of atoms, and every atom is
//! one tile, so hierarchical algorithms never need to slice a tile.

use super::{KernelArgs, ReduceOp};
use kernbench_runtime::kernel::{Addr, DType, Index, Part, Sym, Tile, Tl};
use kernbench_systems::program::QDir;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

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

/// Offset of block `i` (0 to `parts`) of [`split`]`(n, parts)`.
pub fn block_offset(n: usize, parts: usize, i: usize) -> usize {
    i * (n / parts) + i.min(n % parts)
}

/// An atom of a [`Buffer`]: one index per level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Atom(pub Vec<Index>);

/// This participant's buffer (in its cube's HBM or its own TCM, see
/// [`super::KernelArgs::buffer`]), cut into atoms. Atom indices
/// may be per-PE parameters ([`Sym`]), so a kernel that addresses blocks
/// relative to its position traces to one program for every participant;
/// the tiles the kernel holds are tracked by the atoms' values on the PE
/// being traced.
pub struct Buffer {
    base: Addr,
    elems: usize,
    radices: Vec<usize>,
    tiles: FxHashMap<usize, Tile>,
}

impl Buffer {
    /// The buffer of `elems` f16 at `base`.
    pub fn new(base: Addr, elems: usize, radices: &[usize]) -> Self {
        Self {
            base,
            elems,
            radices: radices.to_vec(),
            tiles: FxHashMap::default(),
        }
    }

    /// The atoms whose leading indices are `prefix`, in buffer order.
    pub fn atoms(&self, prefix: &[Index]) -> Vec<Atom> {
        let mut out = vec![Atom(prefix.to_vec())];
        for &r in &self.radices[prefix.len().min(self.radices.len())..] {
            out = out
                .into_iter()
                .flat_map(|a| {
                    (0..r).map(move |d| {
                        let mut v = a.0.clone();
                        v.push(Index::from(d));
                        Atom(v)
                    })
                })
                .collect();
        }
        out
    }

    /// The atom's place in memory, for the tracer.
    pub fn part(&self, a: &Atom) -> Part {
        Part {
            base: self.base,
            elems: self.elems,
            digits: a
                .0
                .iter()
                .cloned()
                .zip(self.radices.iter().copied())
                .collect(),
        }
    }

    /// The atom's number on the PE being traced (None inside a loop body).
    fn key(&self, a: &Atom) -> Option<usize> {
        let mut k = 0;
        for (i, &r) in a.0.iter().zip(&self.radices) {
            k = k * r + i.value(r)?;
        }
        Some(k)
    }

    fn held_key(&self, a: &Atom) -> usize {
        self.key(a)
            .expect("atoms the kernel holds have indices known on the traced PE")
    }

    /// Loads the atoms from HBM.
    pub fn load(&mut self, tl: &mut Tl, atoms: &[Atom]) {
        for a in atoms {
            let t = tl.load_part(&self.part(a));
            self.tiles.insert(self.held_key(a), t);
        }
    }

    /// Loads the atoms that are not held yet, in order.
    pub fn ensure(&mut self, tl: &mut Tl, atoms: &[Atom]) {
        for a in atoms {
            if !self.tiles.contains_key(&self.held_key(a)) {
                self.load(tl, std::slice::from_ref(a));
            }
        }
    }

    /// Stores the atoms to HBM.
    pub fn store(&mut self, tl: &mut Tl, atoms: &[Atom]) {
        for a in atoms {
            let t = self.tile(a);
            tl.store_part(&self.part(a), t);
        }
    }

    pub fn tile(&self, a: &Atom) -> Tile {
        *self
            .tiles
            .get(&self.held_key(a))
            .expect("the kernel loaded or received this atom before using it")
    }

    /// Holds `t` as the atom's tile.
    pub fn set(&mut self, a: &Atom, t: Tile) {
        self.tiles.insert(self.held_key(a), t);
    }

    /// How many atoms the kernel holds in registers.
    pub fn held(&self) -> usize {
        self.tiles.len()
    }

    /// Sends the atoms on `dir`.
    pub fn send(&self, tl: &mut Tl, atoms: &[Atom], dir: QDir) {
        for a in atoms {
            tl.send(dir, self.tile(a));
        }
    }

    /// Receives atom `a` on `from`, combines it in, forwards the result on
    /// `to`.
    pub fn recv_combine(
        &mut self,
        tl: &mut Tl,
        op: ReduceOp,
        a: &Atom,
        from: QDir,
        to: Option<QDir>,
    ) {
        let x = tl.recv_part(from, &self.part(a));
        let t = combine(tl, op, self.tile(a), x);
        self.set(a, t);
        if let Some(d) = to {
            tl.send(d, t);
        }
    }

    /// Receives atom `a` on `from` (replacing it) and forwards it on `to`.
    pub fn recv_replace(&mut self, tl: &mut Tl, a: &Atom, from: QDir, to: Option<QDir>) {
        let x = tl.recv_part(from, &self.part(a));
        self.set(a, x);
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

/// One pipelined chain through this participant: the part of the buffer under
/// `prefix`, cut into pieces and sent down the chain as a stream (piece 0
/// first, or the last piece first when `reversed`), arriving on `from`
/// (None: this participant is the head) and leaving on `to` (None: the tail)
/// and, in a broadcast tree, on every one of `branches` too.
#[derive(Debug, Clone)]
pub struct Chain {
    pub prefix: Vec<Index>,
    pub from: Option<QDir>,
    pub to: Option<QDir>,
    pub branches: Vec<QDir>,
    /// When the stream's first piece reaches this participant, in piece times
    /// after the head sends it (its distance from the head).
    pub offset: usize,
    /// How many pieces of the stream reach this participant (its first `take`):
    /// all of them, unless two chains carry the same part from opposite
    /// ends and meet.
    pub take: usize,
    /// How many of those (the first) it passes on to `to` and `branches`.
    pub forward: usize,
    /// The stream runs from the part's last piece to its first.
    pub reversed: bool,
    /// Whether a reduce takes this participant's own piece in here (loaded and
    /// combined, or loaded and sent by the head). False only where a root
    /// that heads a chain gets the result back at its end: it stores what
    /// it receives. Broadcasts ignore it (the head loads).
    pub adds_own: bool,
}

impl Chain {
    /// A chain whose every piece, in order, passes through this participant and
    /// on down the chain (a tail has nothing to pass on).
    pub fn whole(
        prefix: Vec<Index>,
        from: Option<QDir>,
        to: Option<QDir>,
        offset: usize,
        pieces: usize,
    ) -> Chain {
        Chain {
            prefix,
            from,
            to,
            branches: Vec::new(),
            offset,
            take: pieces,
            forward: pieces,
            reversed: false,
            adds_own: true,
        }
    }

    /// Whether this participant handles a piece of the chain at step `t`.
    fn active(&self, t: usize) -> bool {
        (self.offset..self.offset + self.take).contains(&t)
    }

    /// Whether the piece this participant handles at step `t` goes on.
    fn forwards(&self, t: usize) -> bool {
        t < self.offset + self.forward
    }

    /// The piece of the part at stream position `s` (s counts from 0 at
    /// this participant's offset).
    fn piece(&self, s: Sym, pieces: usize) -> Sym {
        if self.reversed { -s + (pieces - 1) } else { s }
    }
}

/// What the chains do with each piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainKind {
    /// The head loads and sends; the others receive, forward and store.
    Broadcast,
    /// Every participant loads its piece; the others receive and combine it in
    /// before forwarding; the tail stores the result.
    Reduce(ReduceOp),
}

/// Runs `chains` (whose parts are cut into `pieces` each) through this
/// participant, piece by piece, in the order the pieces reach it (stream
/// position s of a chain at its offset + s): a PE waits on one receive at
/// a time, so a chain whose pieces come later must never hold back one
/// whose pieces come sooner. Between the steps where a chain starts,
/// stops forwarding or ends, every step does the same, and those steps run
/// as loops.
///
/// The pieces a participant loads from its buffer (a broadcast head's, every
/// reduce participant's own) are loaded [`LOAD_AHEAD`] steps ahead, so a step
/// never waits for the memory's latency: loaded only when needed, a head
/// sending from HBM is bound by one load latency per piece, not by its
/// links.
pub fn run_chains(tl: &mut Tl, buf: &Buffer, kind: ChainKind, chains: &[Chain], pieces: usize) {
    let run = ChainRun {
        buf,
        kind,
        chains,
        pieces,
    };
    let mut cuts: Vec<usize> = chains
        .iter()
        .flat_map(|c| {
            [
                c.offset,
                c.offset + c.forward.min(c.take),
                c.offset + c.take,
            ]
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let (Some(&start), Some(&end)) = (cuts.first(), cuts.last()) else {
        return;
    };
    let mut ahead: VecDeque<Vec<Option<Tile>>> = (start..start + LOAD_AHEAD)
        .map(|t| run.prefetch(tl, t))
        .collect();
    for w in cuts.windows(2) {
        run.segment(tl, w[0]..w[1], &mut ahead);
    }
    debug_assert!(end == start || ahead.iter().flatten().all(Option::is_none));
}

/// How many steps ahead [`run_chains`] loads a participant's own pieces: two
/// cover an HBM load's latency plus both chains' loads at the port for
/// pieces down to a few KiB (docs/model.md §Pipelining).
pub const LOAD_AHEAD: usize = 2;

/// What [`run_chains`] runs, shared by its steps.
struct ChainRun<'a> {
    buf: &'a Buffer,
    kind: ChainKind,
    chains: &'a [Chain],
    pieces: usize,
}

impl ChainRun<'_> {
    /// Piece of chain `c` at step `t0 + step`, where `step` may be symbolic.
    fn part(&self, c: &Chain, t0: usize, step: Sym) -> Part {
        let s = step + (t0 as i64 - c.offset as i64);
        chain_part(self.buf, c, c.piece(s, self.pieces))
    }

    /// Piece of chain `c` at step `t`, traced as it is.
    fn part_at(&self, c: &Chain, t: usize) -> Part {
        self.part(c, t, Sym::from(0usize))
    }

    /// The loads of step `t`: one per loading chain with a piece then.
    fn prefetch(&self, tl: &mut Tl, t: usize) -> Vec<Option<Tile>> {
        self.chains
            .iter()
            .map(|c| (self.kind.loads(c) && c.active(t)).then(|| tl.load_part(&self.part_at(c, t))))
            .collect()
    }

    /// Step `t` traced as it is, with its loads taken from `ahead`.
    fn unrolled(&self, tl: &mut Tl, t: usize, ahead: &mut VecDeque<Vec<Option<Tile>>>) {
        let mine = ahead.pop_front().unwrap_or_default();
        ahead.push_back(self.prefetch(tl, t + LOAD_AHEAD));
        for (c, mine) in self.chains.iter().zip(mine) {
            if c.active(t) {
                run_piece(tl, self.kind, c, &self.part_at(c, t), c.forwards(t), mine);
            }
        }
    }

    /// Steps `ts`, over which every chain is active or not throughout and
    /// forwards or not throughout: while the look-ahead stays inside them,
    /// blocks of LOAD_AHEAD steps are one loop whose iteration carries the
    /// loaded pieces of the next block.
    fn segment(&self, tl: &mut Tl, ts: Range<usize>, ahead: &mut VecDeque<Vec<Option<Tile>>>) {
        if !self.chains.iter().any(|c| c.active(ts.start)) {
            // No chain has a piece here: a step traces only the look-ahead's
            // loads, none until the last LOAD_AHEAD steps. Tiny pieces make
            // the chain offsets millions of steps long; skipping to those
            // steps keeps tracing linear in the pieces, not the offsets.
            for t in ts.end.saturating_sub(LOAD_AHEAD).max(ts.start)..ts.end {
                self.unrolled(tl, t, ahead);
            }
            return;
        }
        let blocks = ts.len().saturating_sub(LOAD_AHEAD) / LOAD_AHEAD;
        if blocks < 2 {
            for t in ts {
                self.unrolled(tl, t, ahead);
            }
            return;
        }
        let t0 = ts.start;
        let live: Vec<&Chain> = self.chains.iter().filter(|c| c.active(t0)).collect();
        let loading: Vec<&Chain> = live
            .iter()
            .copied()
            .filter(|c| self.kind.loads(c))
            .collect();
        let carried: Vec<Tile> = ahead.drain(..).flatten().flatten().collect();
        let block = LOAD_AHEAD as i64;
        let after = tl.repeat(blocks, &carried, |tl, s, cur| {
            let mut next = Vec::new();
            let mut cur = cur.iter();
            for j in 0..LOAD_AHEAD {
                let step = |ahead: usize| s * block + (j + ahead) as i64;
                for c in &loading {
                    next.push(tl.load_part(&self.part(c, t0, step(LOAD_AHEAD))));
                }
                for c in &live {
                    let mine = if self.kind.loads(c) {
                        cur.next().copied()
                    } else {
                        None
                    };
                    let part = self.part(c, t0, step(0));
                    run_piece(tl, self.kind, c, &part, c.forwards(t0), mine);
                }
            }
            next
        });
        // The loop's last loads, back in `ahead`'s per-chain form.
        let mut after = after.into_iter();
        for _ in 0..LOAD_AHEAD {
            let step = self
                .chains
                .iter()
                .map(|c| {
                    (c.active(t0) && self.kind.loads(c))
                        .then(|| after.next())
                        .flatten()
                })
                .collect();
            ahead.push_back(step);
        }
        for t in t0 + blocks * LOAD_AHEAD..ts.end {
            self.unrolled(tl, t, ahead);
        }
    }
}

impl ChainKind {
    /// Whether a participant loads its piece of `c` from its buffer.
    fn loads(self, c: &Chain) -> bool {
        match self {
            ChainKind::Broadcast => c.from.is_none(),
            ChainKind::Reduce(_) => c.adds_own,
        }
    }
}

/// Piece `piece` of a chain's part of the buffer.
fn chain_part(buf: &Buffer, c: &Chain, piece: Sym) -> Part {
    let mut digits = c.prefix.clone();
    digits.push(Index::At(piece));
    buf.part(&Atom(digits))
}

/// One piece (`part`) of one chain at this participant, passed on down the
/// chain when `forwards`; `mine` is the piece loaded from this participant's
/// buffer, when it loads one.
fn run_piece(
    tl: &mut Tl,
    kind: ChainKind,
    c: &Chain,
    part: &Part,
    forwards: bool,
    mine: Option<Tile>,
) {
    let mut mine = || mine.unwrap_or_else(|| tl.load_part(part));
    let t = match (kind, c.from) {
        (ChainKind::Broadcast, None) | (ChainKind::Reduce(_), None) => mine(),
        (ChainKind::Broadcast, Some(from)) => tl.recv_part(from, part),
        (ChainKind::Reduce(_), Some(from)) if !c.adds_own => tl.recv_part(from, part),
        (ChainKind::Reduce(op), Some(from)) => {
            let mine = mine();
            let x = tl.recv_part(from, part);
            combine(tl, op, mine, x)
        }
    };
    if forwards {
        for &to in c.to.iter().chain(&c.branches) {
            tl.send(to, t);
        }
    }
    let stores = match kind {
        ChainKind::Broadcast => c.from.is_some(),
        ChainKind::Reduce(_) => c.to.is_none(),
    };
    if stores {
        tl.store_part(part, t);
    }
}

/// One participant's buffer seen as element ranges (what rhd and dims move:
/// ranges cut by the schedule, not ring blocks): ranges cut into pipeline
/// pieces, loaded, stored and received as one tile per piece.
pub struct RangeIo<'a> {
    pub a: &'a KernelArgs,
    pub base: Addr,
}

impl RangeIo<'_> {
    /// The ranges cut into pipeline pieces; empty ones drop out (both ends
    /// of a transfer compute the same list).
    pub fn pieces(&self, ranges: &[Range<usize>]) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        for r in ranges.iter().filter(|r| !r.is_empty()) {
            for (o, len) in split(r.len(), self.a.pieces(r.len(), 1)) {
                out.push(r.start + o..r.start + o + len);
            }
        }
        out
    }

    /// The whole buffer cut into pipeline pieces.
    pub fn whole(&self) -> Vec<Range<usize>> {
        self.pieces(std::slice::from_ref(&(0..self.a.job.elems)))
    }

    /// Element `i` of the buffer.
    pub fn at(&self, i: usize) -> Addr {
        self.base.plus(2 * i as u64)
    }

    pub fn load(&self, tl: &mut Tl, parts: &[Range<usize>]) -> Vec<Tile> {
        parts
            .iter()
            .map(|r| tl.load(self.at(r.start), r.len()))
            .collect()
    }

    pub fn store(&self, tl: &mut Tl, parts: &[Range<usize>], tiles: &[Tile]) {
        for (r, &t) in parts.iter().zip(tiles) {
            tl.store(self.at(r.start), t);
        }
    }

    pub fn recv(&self, tl: &mut Tl, dir: QDir, parts: &[Range<usize>]) -> Vec<Tile> {
        parts
            .iter()
            .map(|r| tl.recv(dir, &[r.len()], DType::F16))
            .collect()
    }
}

/// Sends `tiles` on `dir`, in order.
pub fn send_tiles(tl: &mut Tl, dir: QDir, tiles: &[Tile]) {
    for &t in tiles {
        tl.send(dir, t);
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
    fn atoms_enumerate_blocks_in_buffer_order() {
        let b = Buffer::new(Addr::hbm(0), 100, &[2, 3, 2]);
        let digits = |a: &Atom| -> Vec<usize> {
            a.0.iter()
                .zip([2, 3, 2])
                .map(|(i, r)| i.value(r).unwrap())
                .collect()
        };
        let all = b.atoms(&[]);
        assert_eq!(all.len(), 12);
        assert_eq!(digits(&all[7]), vec![1, 0, 1]);
        let block = b.atoms(&[1.into(), 2.into()]);
        assert_eq!(
            block.iter().map(digits).collect::<Vec<_>>(),
            vec![vec![1, 2, 0], vec![1, 2, 1]]
        );
        assert_eq!(b.part(&all[7]).digits.len(), 3);
    }

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
