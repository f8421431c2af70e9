//! `rhd`: recursive halving-doubling (Rabenseifner), `2·log2 n` steps for
//! all-reduce — latency-optimal for small buffers, and bandwidth-optimal
//! too (each participant sends `2(n−1)/n` of its buffer).
//!
//! Reduce-scatter halves the range a participant is responsible for at every
//! step, exchanging the other half with the partner `v XOR 2^b` (logical
//! channel `b`); all-gather undoes the steps in reverse, doubling the range.
//! All-reduce is both. A non-power-of-two `n` is folded first: of the first
//! `2r` participants (`r = n − 2^⌊log2 n⌋`) each odd one hands its buffer
//! to the even one before it (channel [`FOLD`]) and gets the result back at
//! the end; the `2^⌊log2 n⌋` others (the *core*, core index `v`) run the
//! power-of-two algorithm.
//!
//! Block order. Reduce-scatter and all-gather must leave participant `p` with
//! flat block `p` of `split(elems, n)`: core participant `v` stands for the
//! flat blocks of the participants it represents (two for a folded pair), and
//! the halving splits on the highest bit first, so a participant's range stays
//! a contiguous run of blocks ending at its own. All-reduce may own any block:
//! it cuts the buffer into `2^⌊log2 n⌋` equal blocks and splits on bit 0 first,
//! so the large early halves go to the nearest partners.
//!
//! Cuts. A tile cannot be sliced, so every transfer is cut in advance into
//! the ranges the receiver will need: the half it sends on at its next step
//! (itself cut the same way, recursively) and the half it keeps, whole
//! ([`HalvingPlan::cut`]). A combined piece is thus forwarded the moment it is
//! ready; the kept half is stored and reloaded in its own cut while the
//! next transfer is on the wire. All-gather forwards what it received in
//! the cut it arrived in, after its own range, reloaded whole
//! ([`HalvingPlan::ag_cut`]). Every range is further cut into pipeline pieces.

use super::primitives::me;
use crate::cost::{CostTerms, HeldPrograms, InFlight, log2_levels, participants};
use crate::kernels::{RangeIo, block_offset, combine, send_tiles};
use crate::{Algorithm, Collective, Group, KernelArgs, ReduceOp};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::kernel::{Tile, Tl};
use kernbench_systems::ipcq::{Entry, Tables};
use kernbench_systems::program::QDir;
use std::ops::Range;

pub struct Rhd;

/// The channel between the two participants of a folded pair: above every bit
/// channel (a group has fewer than 2^32 participants).
pub const FOLD: QDir = QDir::Chan(32);

/// The channel to the partner across bit `b`.
fn chan(b: usize) -> QDir {
    QDir::Chan(b as u8)
}

/// How `n` participants fold onto a power-of-two core of `m = 2^levels`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fold {
    pub n: usize,
    pub m: usize,
    pub levels: usize,
}

impl Fold {
    pub fn new(n: usize) -> Self {
        let levels = (usize::BITS - 1 - n.max(1).leading_zeros()) as usize;
        Self {
            n,
            m: 1 << levels,
            levels,
        }
    }

    /// Folded pairs: participants `2i` (in the core) and `2i + 1` (out).
    pub fn pairs(&self) -> usize {
        self.n - self.m
    }

    /// Participant `p`'s index in the core, or None for the odd one of a pair.
    pub fn core_index(&self, p: usize) -> Option<usize> {
        let r = self.pairs();
        match p {
            p if p < 2 * r && p % 2 == 1 => None,
            p if p < 2 * r => Some(p / 2),
            p => Some(p - r),
        }
    }

    /// The participant at core index `v`.
    pub fn participant(&self, v: usize) -> usize {
        if v < self.pairs() {
            2 * v
        } else {
            v + self.pairs()
        }
    }

    /// The other participant of `p`'s folded pair, if it is in one.
    pub fn pair_of(&self, p: usize) -> Option<usize> {
        (p < 2 * self.pairs()).then_some(p ^ 1)
    }
}

/// The halving schedule of one collective on the core.
pub struct HalvingPlan {
    pub fold: Fold,
    /// The bit each reduce-scatter step splits on; all-gather runs it
    /// backwards.
    pub sched: Vec<usize>,
    elems: usize,
    /// Core block `i` is the flat blocks of core participant `i`
    /// (reduce-scatter, all-gather), not an equal `1/m` of the buffer
    /// (all-reduce).
    flat: bool,
}

impl HalvingPlan {
    pub fn new(collective: Collective, elems: usize, n: usize) -> Self {
        let fold = Fold::new(n);
        let flat = collective != Collective::AllReduce;
        let sched = if flat {
            (0..fold.levels).rev().collect()
        } else {
            (0..fold.levels).collect()
        };
        Self {
            fold,
            sched,
            elems,
            flat,
        }
    }

    fn levels(&self) -> usize {
        self.fold.levels
    }

    /// Core participant `x`'s partner at step `k`.
    pub fn partner(&self, x: usize, k: usize) -> usize {
        x ^ (1 << self.sched[k])
    }

    /// Flat block `f` of `split(elems, n)`.
    fn flat_block(&self, f: usize) -> Range<usize> {
        let n = self.fold.n;
        block_offset(self.elems, n, f)..block_offset(self.elems, n, f + 1)
    }

    /// First element of core block `i` (`i = m`: the end).
    fn start(&self, i: usize) -> usize {
        if self.flat {
            let r = self.fold.pairs();
            block_offset(self.elems, self.fold.n, if i < r { 2 * i } else { i + r })
        } else {
            block_offset(self.elems, self.fold.m, i)
        }
    }

    /// The core block `x` ends with, in its ranges: two flat blocks for
    /// the even participant of a folded pair in reduce-scatter and all-gather.
    pub fn leaf(&self, x: usize) -> Vec<Range<usize>> {
        let i = self.first_block(x, self.levels());
        if self.flat && i < self.fold.pairs() {
            vec![self.flat_block(2 * i), self.flat_block(2 * i + 1)]
        } else {
            let block = self.start(i)..self.start(i + 1);
            vec![block]
        }
    }

    /// The first core block of `x`'s range after `k` halving steps.
    fn first_block(&self, x: usize, k: usize) -> usize {
        let l = self.levels();
        (0..k)
            .map(|i| ((x >> self.sched[i]) & 1) << (l - 1 - i))
            .sum()
    }

    /// `x`'s elements after `k` halving steps.
    pub fn range(&self, x: usize, k: usize) -> Range<usize> {
        let lo = self.first_block(x, k);
        self.start(lo)..self.start(lo + (1 << (self.levels() - k)))
    }

    /// `x`'s range after `j` steps as one piece (its leaf's pieces at the end).
    fn own(&self, x: usize, j: usize) -> Vec<Range<usize>> {
        if j == self.levels() {
            self.leaf(x)
        } else {
            vec![self.range(x, j)]
        }
    }

    /// How `x` receives its range after `k` steps at step `k − 1`: the half
    /// it sends on at step `k` cut as its partner there wants it, then the
    /// half it keeps, whole.
    pub fn cut(&self, x: usize, k: usize) -> Vec<Range<usize>> {
        if k == self.levels() {
            return self.leaf(x);
        }
        let mut c = self.cut(self.partner(x, k), k + 1);
        c.extend(self.own(x, k + 1));
        c
    }

    /// The whole buffer as `x` holds it for step 0.
    pub fn first_cut(&self, x: usize) -> Vec<Range<usize>> {
        let mut c = self.cut(self.partner(x, 0), 1);
        c.extend(self.cut(x, 1));
        c
    }

    /// How `x` sends its range after `j` steps in all-gather: its own range
    /// after `j + 1` steps whole, then what it received across step `j`'s
    /// bit in the cut it arrived in.
    pub fn ag_cut(&self, x: usize, j: usize) -> Vec<Range<usize>> {
        if j == self.levels() {
            return self.leaf(x);
        }
        let mut c = self.own(x, j + 1);
        c.extend(self.ag_cut(self.partner(x, j), j + 1));
        c
    }

    /// What a folded even participant `x` passes to its odd partner while it
    /// gathers: its leaf (without the odd one's own block in all-gather),
    /// then what it receives at each all-gather step.
    pub fn stream(&self, x: usize, collective: Collective) -> Vec<Range<usize>> {
        let mut c = self.leaf(x);
        if collective == Collective::AllGather {
            c.truncate(1);
        }
        for k in (0..self.levels()).rev() {
            c.extend(self.ag_cut(self.partner(x, k), k + 1));
        }
        c
    }
}

/// Combines `got` into `mine` piece by piece; the first `forward` results
/// leave on `to` as soon as each is ready.
fn combine_forward(
    tl: &mut Tl,
    op: ReduceOp,
    (mine, got): (&[Tile], &[Tile]),
    forward: usize,
    to: QDir,
) -> Vec<Tile> {
    let mut out = Vec::with_capacity(mine.len());
    for (i, (&m, &g)) in mine.iter().zip(got).enumerate() {
        let t = combine(tl, op, m, g);
        if i < forward {
            tl.send(to, t);
        }
        out.push(t);
    }
    out
}

/// The first step's tiles of core participant `v`: its buffer in
/// [`HalvingPlan::first_cut`] (combined with its odd partner's, which arrives
/// in the same cut, when folded), the half for step 0's partner sent at once.
/// Returns the kept half, in `cut(v, 1)`.
fn start_halving(
    tl: &mut Tl,
    io: &RangeIo,
    plan: &HalvingPlan,
    v: usize,
    folded: bool,
) -> Vec<Tile> {
    let parts = io.pieces(&plan.first_cut(v));
    let sent = io.pieces(&plan.cut(plan.partner(v, 0), 1)).len();
    let mine = io.load(tl, &parts);
    let held = if folded {
        let got = io.recv(tl, FOLD, &parts);
        combine_forward(tl, io.a.job.op, (&mine, &got), sent, chan(plan.sched[0]))
    } else {
        send_tiles(tl, chan(plan.sched[0]), &mine[..sent]);
        mine
    };
    held[sent..].to_vec()
}

/// Recursive halving from step 0 (its half already sent) with `mine`, the
/// kept half in `cut(v, 1)`; returns the reduced leaf's tiles.
fn halve(
    tl: &mut Tl,
    io: &RangeIo,
    plan: &HalvingPlan,
    v: usize,
    mut mine: Vec<Tile>,
) -> Vec<Tile> {
    let l = plan.levels();
    for k in 0..l {
        let got = io.recv(tl, chan(plan.sched[k]), &io.pieces(&plan.cut(v, k + 1)));
        let (forward, to) = if k + 1 < l {
            let next = plan.cut(plan.partner(v, k + 1), k + 2);
            (io.pieces(&next).len(), chan(plan.sched[k + 1]))
        } else {
            (0, FOLD)
        };
        let res = combine_forward(tl, io.a.job.op, (&mine, &got), forward, to);
        mine = res[forward..].to_vec();
        if k + 2 < l {
            // The kept half, reshaped through memory into the next cut
            // while the next transfer is on the wire.
            io.store(tl, &io.pieces(&plan.own(v, k + 2)), &mine);
            mine = io.load(tl, &io.pieces(&plan.cut(v, k + 2)));
        }
    }
    mine
}

/// Recursive doubling from `leaf` (this participant's leaf tiles, in memory
/// already); every received piece is stored, and passed on `stream` too.
fn double(
    tl: &mut Tl,
    io: &RangeIo,
    plan: &HalvingPlan,
    v: usize,
    leaf: &[Tile],
    stream: Option<QDir>,
) {
    let l = plan.levels();
    let mut prev: Option<(Vec<Range<usize>>, Vec<Tile>)> = None;
    for k in (0..l).rev() {
        let d = chan(plan.sched[k]);
        if k + 2 >= l {
            send_tiles(tl, d, leaf);
        } else {
            let own = io.pieces(&plan.own(v, k + 2));
            let tiles = io.load(tl, &own);
            send_tiles(tl, d, &tiles);
        }
        let parts = io.pieces(&plan.ag_cut(plan.partner(v, k), k + 1));
        let got = io.recv(tl, d, &parts);
        if let Some((pp, pt)) = prev.replace((parts, got)) {
            send_tiles(tl, d, &pt);
            keep(tl, io, &pp, &pt, stream);
        }
    }
    if let Some((pp, pt)) = prev {
        keep(tl, io, &pp, &pt, stream);
    }
}

/// Stores received pieces and passes them on `stream`.
fn keep(tl: &mut Tl, io: &RangeIo, parts: &[Range<usize>], tiles: &[Tile], stream: Option<QDir>) {
    io.store(tl, parts, tiles);
    if let Some(d) = stream {
        send_tiles(tl, d, tiles);
    }
}

/// A core participant: fold in, halve and/or double, fold out.
fn core(tl: &mut Tl, io: &RangeIo, plan: &HalvingPlan, p: usize, v: usize) {
    let folded = plan.fold.pair_of(p).is_some();
    let stream = folded.then_some(FOLD);
    let c = io.a.job.collective;
    if c == Collective::AllGather {
        let mine = io.pieces(&[plan.flat_block(p)]);
        let mut leaf = io.load(tl, &mine);
        if folded {
            let theirs = io.pieces(&[plan.flat_block(p + 1)]);
            let got = io.recv(tl, FOLD, &theirs);
            io.store(tl, &theirs, &got);
            // The odd one has its own block; it gets the rest.
            send_tiles(tl, FOLD, &leaf);
            leaf.extend(got);
        }
        double(tl, io, plan, v, &leaf, stream);
        return;
    }
    let mine = start_halving(tl, io, plan, v, folded);
    let leaf = halve(tl, io, plan, v, mine);
    let parts = io.pieces(&plan.leaf(v));
    io.store(tl, &parts, &leaf);
    if c == Collective::ReduceScatter {
        if folded {
            let first = io.pieces(&plan.leaf(v)[..1]).len();
            send_tiles(tl, FOLD, &leaf[first..]);
        }
        return;
    }
    if let Some(d) = stream {
        send_tiles(tl, d, &leaf);
    }
    double(tl, io, plan, v, &leaf, stream);
}

/// The odd participant of a folded pair: hand the buffer (or, gathering, its
/// block) to the even one, take the result back.
fn folded_out(tl: &mut Tl, io: &RangeIo, plan: &HalvingPlan, p: usize) {
    let v = plan
        .fold
        .core_index(p - 1)
        .expect("the even one of a pair is in the core");
    let c = io.a.job.collective;
    let give = if c == Collective::AllGather {
        io.pieces(&[plan.flat_block(p)])
    } else {
        io.pieces(&plan.first_cut(v))
    };
    let tiles = io.load(tl, &give);
    send_tiles(tl, FOLD, &tiles);
    let back = if c == Collective::ReduceScatter {
        io.pieces(&[plan.flat_block(p)])
    } else {
        io.pieces(&plan.stream(v, c))
    };
    let got = io.recv(tl, FOLD, &back);
    io.store(tl, &back, &got);
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let n = a.group.size();
    let p = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let plan = HalvingPlan::new(a.job.collective, a.job.elems, n);
    let io = RangeIo {
        a,
        base: a.buffer(tl),
    };
    match plan.fold.core_index(p) {
        Some(v) => core(tl, &io, &plan, p, v),
        None => folded_out(tl, &io, &plan, p),
    }
}

impl Algorithm for Rhd {
    fn name(&self) -> &'static str {
        "rhd"
    }
    fn summary(&self) -> &'static str {
        "recursive halving-doubling (Rabenseifner): log2 n exchanges each way, halves of the range"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
        ]
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let f = Fold::new(g.size());
        g.wire_each(|p| {
            let mut e: Vec<Entry> = f
                .pair_of(p)
                .map(|x| q.entry(FOLD, g.pe(x), FOLD))
                .into_iter()
                .collect();
            if let Some(v) = f.core_index(p) {
                e.extend(
                    (0..f.levels)
                        .map(|b| q.entry(chan(b), g.pe(f.participant(v ^ (1 << b))), chan(b))),
                );
            }
            e
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // Step k of each phase sends its half cut into about levels − k
        // ranges: levels(levels + 1)/2 sends carry (p−1)/p of the buffer.
        let p = participants(g);
        let levels = log2_levels(g);
        let phases = if c == Collective::AllReduce { 2.0 } else { 1.0 };
        let per_phase = levels * (levels + 1.0) / 2.0;
        let (sends, bytes_per_send) = (phases * per_phase, bytes * (p - 1.0) / p / per_phase);
        CostTerms {
            sends,
            bytes_per_send,
            stages: 1,
            // Partners at growing distances share links unevenly, so the
            // participants drift apart: about √p act on one tick (counted
            // 0.8-6.9 messages a schedule run on 4-64 participants of rings
            // and tori).
            lockstep: p.sqrt(),
            register_pieces: 1.0,
            programs: HeldPrograms::Unrolled {
                programs: g.size() as f64,
            },
            fanout: 1.0,
            // The reduce-scatter's sends load before its first receive.
            in_flight: InFlight::Sends(sends / phases),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every participant is in the core or folded onto an even one, and
    /// core indices and participants map one to one.
    #[test]
    fn the_fold_pairs_the_first_2r_and_keeps_a_power_of_two() {
        for n in 1..40 {
            let f = Fold::new(n);
            assert!(f.m <= n && n < 2 * f.m, "n={n}");
            let core: Vec<usize> = (0..n).filter_map(|p| f.core_index(p)).collect();
            assert_eq!(core, (0..f.m).collect::<Vec<_>>(), "n={n}");
            for v in 0..f.m {
                assert_eq!(f.core_index(f.participant(v)), Some(v));
            }
            assert_eq!(
                (0..n).filter(|&p| f.pair_of(p).is_some()).count(),
                2 * f.pairs()
            );
        }
    }

    /// Every cut tiles the range it carries exactly once (the first cut:
    /// the whole buffer), and reduce-scatter and all-gather leave core
    /// participant v with participant v's flat block.
    #[test]
    fn cuts_tile_the_ranges_they_carry() {
        for (c, n, elems) in [
            (Collective::AllReduce, 16, 1000),
            (Collective::AllReduce, 6, 7),
            (Collective::ReduceScatter, 6, 131),
            (Collective::AllGather, 5, 131),
            (Collective::ReduceScatter, 16, 3),
        ] {
            let plan = HalvingPlan::new(c, elems, n);
            let covers = |parts: &[Range<usize>], r: Range<usize>| {
                let mut sorted = parts.to_vec();
                sorted.sort_by_key(|p| p.start);
                let mut at = r.start;
                for p in &sorted {
                    assert_eq!(p.start, at, "{c} n={n}: {parts:?} for {r:?}");
                    at = p.end;
                }
                assert_eq!(at, r.end, "{c} n={n}: {parts:?} for {r:?}");
            };
            for v in 0..plan.fold.m {
                covers(&plan.first_cut(v), 0..elems);
                for k in 1..=plan.levels() {
                    covers(&plan.cut(v, k), plan.range(v, k));
                    covers(&plan.ag_cut(v, k), plan.range(v, k));
                }
                if c != Collective::AllReduce {
                    let p = plan.fold.participant(v);
                    assert_eq!(plan.leaf(v)[0], plan.flat_block(p));
                }
            }
        }
    }
}
