//! `dims`: dimension-wise direct exchange, latency-optimal for small
//! buffers on every SIP topology. A participant's index is a number whose
//! digits are its coordinates: the cube's x and y in its SIP's cube mesh
//! (least significant), then the SIP's x and y in the SIP grid. Along one
//! dimension the participants that differ only in that digit form a *line*;
//! every participant of a line has a logical channel to every other one, so one
//! level of the algorithm is a single direct transfer of at most the
//! line's diameter. The whole collective costs about the sum of the lines'
//! diameters (the latency term of the bound on a torus or mesh, and half
//! of each ring dimension on a ring) instead of `log2 P` or `P` steps.
//!
//! * all-reduce: per dimension (cube x, cube y, SIP x, SIP y), every
//!   participant sends its vector to the others of its line and combines what
//!   it gets in coordinate order, so every participant of a line computes the
//!   same bits;
//! * reduce-scatter: per dimension from the most significant, every participant
//!   sends each peer of its line the part of its run of blocks that peer
//!   is responsible for, and combines the parts it gets in coordinate
//!   order (stored, then reloaded in the next level's cut);
//! * all-gather: per dimension from the least significant, every participant
//!   sends the contiguous run of blocks it holds (stored, then reloaded as
//!   one range) to the others of its line;
//! * broadcast: from participant 0 along each dimension in turn (SIP y, SIP x,
//!   cube y, cube x), the participants that hold the buffer sending it to the
//!   rest of their line;
//! * reduce: the reverse, each line reduced into its coordinate-0 participant;
//! * all-to-all: per dimension, every participant sends each peer of its line
//!   the blocks whose destination has that peer's coordinate there (one
//!   2-D transfer) and stores the blocks it gets in their place.
//!
//! Each participant sends whole ranges to up to `r − 1` peers per dimension, so
//! it moves far more bytes than a ring at large sizes: this is the
//! small-size algorithm.

use super::primitives::me;
use crate::cost::{CostTerms, InFlight};
use crate::kernels::{RangeIo, block_offset, combine, send_tiles};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::kernel::{DType, Tile, Tl};
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;
use std::ops::Range;

pub struct Dims;

/// One dimension of the participant grid: `radix` coordinates, `stride`
/// apart in participant index; its channels start at `chan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim {
    pub radix: usize,
    pub stride: usize,
    chan: usize,
}

impl Dim {
    /// Coordinate of participant `p`.
    pub fn coord(&self, p: usize) -> usize {
        (p / self.stride) % self.radix
    }

    /// The participant with `p`'s other coordinates and coordinate `c` here.
    pub fn with(&self, p: usize, c: usize) -> usize {
        p - self.coord(p) * self.stride + c * self.stride
    }

    /// The channel to the participant `e` coordinates further (mod radix),
    /// 1 ≤ e < radix.
    fn chan(&self, e: usize) -> QDir {
        QDir::Chan((self.chan + e - 1) as u8)
    }

    /// The channel from `p` to the participant of its line at coordinate `c`.
    fn to(&self, p: usize, c: usize) -> QDir {
        self.chan((c + self.radix - self.coord(p)) % self.radix)
    }
}

/// Most logical channels a participant may have (a channel number is a u8).
const MAX_CHANNELS: usize = 256;

/// The longest line a dimension keeps whole; a longer one is cut in two
/// digits ([`digits`]).
pub const LONGEST_LINE: usize = 16;

/// A side of `radix` coordinates as the digits (radix, stride) of its
/// lines, least significant first. A side longer than [`LONGEST_LINE`] with
/// a divisor `a` in 2..=√radix becomes two digits: runs of `a` neighbours
/// (the largest such divisor), then every `a`-th coordinate. On a ring of
/// 256 SIPs a line of 255 peers (255 queues per participant, about
/// 256·16384·S bytes of unicast over 512 link directions for an
/// all-reduce) becomes lines of 15 and 15: one more level, 30 queues and
/// about 1/30 of the bytes.
fn digits(radix: usize, stride: usize) -> Vec<(usize, usize)> {
    if radix > LONGEST_LINE
        && let Some(a) = (2..=radix.isqrt()).rev().find(|a| radix.is_multiple_of(*a))
    {
        return vec![(a, stride), (radix / a, stride * a)];
    }
    vec![(radix, stride)]
}

/// The dimensions of the group with more than one coordinate, least
/// significant first: cube x, cube y, SIP x, SIP y, each side longer than
/// [`LONGEST_LINE`] cut in two digits where it factors.
pub fn dims(g: &Group) -> Vec<Dim> {
    let (cw, ch) = (g.cubes.0 as usize, g.cubes.1 as usize);
    let (w, h) = (g.grid.0 as usize, g.grid.1 as usize);
    let c = cw * ch;
    let mut out = Vec::new();
    let mut chan = 0;
    let sides = [(cw, 1), (ch, cw), (w, c), (h, c * w)];
    for (radix, stride) in sides.into_iter().flat_map(|(r, s)| digits(r, s)) {
        if radix > 1 {
            out.push(Dim {
                radix,
                stride,
                chan,
            });
            chan += radix - 1;
        }
    }
    out
}

fn channels(g: &Group) -> usize {
    dims(g).iter().map(|d| d.radix - 1).sum()
}

/// Elements of the flat blocks `blocks` of `split(elems, n)`.
fn blocks(elems: usize, n: usize, blocks: Range<usize>) -> Range<usize> {
    block_offset(elems, n, blocks.start)..block_offset(elems, n, blocks.end)
}

/// The run of blocks of the participants that share `q`'s digits in every
/// dimension but the first `k` of `ds`: what q is responsible for before
/// reduce-scatter level `k` is done, and what it holds after all-gather's
/// first `k` levels.
fn span(ds: &[Dim], q: usize, k: usize) -> Range<usize> {
    let len: usize = ds[..k].iter().map(|d| d.radix).product();
    let first = q - ds[..k].iter().map(|d| d.coord(q) * d.stride).sum::<usize>();
    first..first + len
}

/// The whole buffer reduced on every participant.
fn all_reduce(tl: &mut Tl, io: &RangeIo, ds: &[Dim], p: usize) {
    let parts = io.whole();
    let mut mine = io.load(tl, &parts);
    for d in ds {
        let m = d.coord(p);
        for c in (0..d.radix).filter(|&c| c != m) {
            send_tiles(tl, d.to(p, c), &mine);
        }
        // Coordinate order, the same on every participant of the line.
        let mut acc: Option<Vec<Tile>> = None;
        for c in 0..d.radix {
            let x = if c == m {
                mine.clone()
            } else {
                io.recv(tl, d.to(p, c), &parts)
            };
            acc = Some(match acc {
                None => x,
                Some(a) => combine_all(tl, io, &a, &x),
            });
        }
        mine = acc.expect("a line has participants");
    }
    io.store(tl, &parts, &mine);
}

fn combine_all(tl: &mut Tl, io: &RangeIo, a: &[Tile], b: &[Tile]) -> Vec<Tile> {
    a.iter()
        .zip(b)
        .map(|(&a, &b)| combine(tl, io.a.job.op, a, b))
        .collect()
}

/// Reduce-scatter: most significant dimension first, so what a participant is
/// responsible for is always a contiguous run of blocks. At each level it
/// loads its run cut by the line's coordinate, sends each peer that peer's
/// part, combines the parts it receives into its own in coordinate order
/// and stores the result, which the next level reloads in its own cut.
fn reduce_scatter(tl: &mut Tl, io: &RangeIo, ds: &[Dim], p: usize) {
    let (elems, n) = (io.a.job.elems, io.a.group.size());
    for k in (0..ds.len()).rev() {
        let d = &ds[k];
        let m = d.coord(p);
        let part = |c: usize| io.pieces(&[blocks(elems, n, span(ds, d.with(p, c), k))]);
        for c in (0..d.radix).filter(|&c| c != m) {
            let parts = part(c);
            let t = io.load(tl, &parts);
            send_tiles(tl, d.to(p, c), &t);
        }
        let own = part(m);
        let mut acc: Option<Vec<Tile>> = None;
        for c in 0..d.radix {
            let x = if c == m {
                io.load(tl, &own)
            } else {
                io.recv(tl, d.to(p, c), &own)
            };
            acc = Some(match acc {
                None => x,
                Some(a) => combine_all(tl, io, &a, &x),
            });
        }
        io.store(tl, &own, &acc.expect("a line has participants"));
    }
}

/// All-gather: least significant dimension first, so what a participant holds
/// is always a contiguous run of blocks.
fn all_gather(tl: &mut Tl, io: &RangeIo, ds: &[Dim], p: usize) {
    let (elems, n) = (io.a.job.elems, io.a.group.size());
    for (k, d) in ds.iter().enumerate() {
        let m = d.coord(p);
        let own = io.pieces(&[blocks(elems, n, span(ds, p, k))]);
        let mine = io.load(tl, &own);
        for c in (0..d.radix).filter(|&c| c != m) {
            send_tiles(tl, d.to(p, c), &mine);
        }
        for c in (0..d.radix).filter(|&c| c != m) {
            let parts = io.pieces(&[blocks(elems, n, span(ds, d.with(p, c), k))]);
            let got = io.recv(tl, d.to(p, c), &parts);
            io.store(tl, &parts, &got);
        }
    }
}

/// Broadcast from participant 0: most significant dimension first; at each
/// level the participants whose coordinates in the dimensions not yet covered
/// are all 0 hold the buffer.
fn broadcast(tl: &mut Tl, io: &RangeIo, ds: &[Dim], p: usize) {
    let parts = io.whole();
    let mut mine: Option<Vec<Tile>> = (p == 0).then(|| io.load(tl, &parts));
    for (k, d) in ds.iter().enumerate().rev() {
        // Active: every coordinate below this dimension is 0.
        if ds[..k].iter().any(|x| x.coord(p) != 0) {
            continue;
        }
        let m = d.coord(p);
        match &mine {
            Some(t) if m == 0 => {
                for c in 1..d.radix {
                    send_tiles(tl, d.to(p, c), t);
                }
            }
            None if m != 0 => {
                let got = io.recv(tl, d.to(p, 0), &parts);
                mine = Some(got);
            }
            _ => {}
        }
    }
    if p != 0
        && let Some(t) = &mine
    {
        io.store(tl, &parts, t);
    }
}

/// Reduce into participant 0: least significant dimension first; each line
/// is reduced into its coordinate-0 participant, in coordinate order.
fn reduce(tl: &mut Tl, io: &RangeIo, ds: &[Dim], p: usize) {
    let parts = io.whole();
    let mut mine = io.load(tl, &parts);
    for (k, d) in ds.iter().enumerate() {
        if ds[..k].iter().any(|x| x.coord(p) != 0) {
            return;
        }
        let m = d.coord(p);
        if m != 0 {
            send_tiles(tl, d.to(p, 0), &mine);
            return;
        }
        for c in 1..d.radix {
            let x = io.recv(tl, d.to(p, c), &parts);
            mine = combine_all(tl, io, &mine, &x);
        }
    }
    if p == 0 {
        io.store(tl, &parts, &mine);
    }
}

/// All-to-all: one level per dimension. Block `j` of a participant's buffer is
/// kept in slot `j`; at the level of dimension `d` the participant sends peer
/// `c` of its line every slot whose digit `d` is `c` (one 2-D transfer: the
/// slots are `rows` runs of `stride` blocks, `radix · stride` blocks apart) and
/// stores what `c` sends back in the same slots, which then hold data from
/// source coordinate `c`. After every digit, slot `j` holds participant `j`'s
/// block for this participant.
fn all_to_all(tl: &mut Tl, io: &RangeIo, ds: &[Dim], p: usize) {
    let n = io.a.group.size();
    let b = io.a.job.elems / n;
    for d in ds.iter().rev() {
        let m = d.coord(p);
        let rows = n / (d.radix * d.stride);
        let (cols, pitch) = (d.stride * b, d.radix * d.stride * b);
        let rect = |c: usize| io.at(c * d.stride * b);
        let peers: Vec<usize> = (0..d.radix).filter(|&c| c != m).collect();
        for &c in &peers {
            let t = tl.load_rect(rect(c), rows, cols, pitch);
            tl.send(d.to(p, c), t);
        }
        for &c in &peers {
            let t = tl.recv(d.to(p, c), &[rows * cols], DType::F16);
            tl.store_rect(rect(c), t, rows, cols, pitch);
        }
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let g = &a.group;
    let p = me(tl, g);
    if g.size() == 1 {
        return;
    }
    let ds = dims(g);
    let io = RangeIo {
        a,
        base: a.buffer(tl),
    };
    match a.job.collective {
        Collective::AllReduce => all_reduce(tl, &io, &ds, p),
        Collective::ReduceScatter => reduce_scatter(tl, &io, &ds, p),
        Collective::AllGather => all_gather(tl, &io, &ds, p),
        Collective::Broadcast => broadcast(tl, &io, &ds, p),
        Collective::Reduce => reduce(tl, &io, &ds, p),
        Collective::AllToAll => all_to_all(tl, &io, &ds, p),
    }
}

impl Algorithm for Dims {
    fn name(&self) -> &'static str {
        "dims"
    }
    fn summary(&self) -> &'static str {
        "dimension-wise direct exchange (cube x, cube y, SIP x, SIP y lines): about the sum of the lines' diameters; for small buffers"
    }
    fn collectives(&self) -> &'static [Collective] {
        &Collective::ALL
    }
    fn check_group(&self, g: &Group) -> Result<(), String> {
        let c = channels(g);
        if c > MAX_CHANNELS {
            return Err(format!(
                "{c} logical channels per participant (one per other participant of each line), at most {MAX_CHANNELS}; allowed: grids and cube meshes whose sides minus one sum to at most {MAX_CHANNELS}"
            ));
        }
        Ok(())
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let ds = dims(g);
        g.wire_each(|p| {
            let mut e = Vec::new();
            for d in &ds {
                for off in 1..d.radix {
                    let peer = d.with(p, (d.coord(p) + off) % d.radix);
                    e.push(q.entry(d.chan(off), g.pe(peer), d.chan(d.radix - off)));
                }
            }
            e
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        let ds = dims(g);
        let mut terms = CostTerms::unrolled_blocks(g, c, bytes);
        // As many participants act on one tick as a participant has lines
        // (counted 0.3-2.2 messages a schedule run on rings, meshes and
        // tori of 4-64 participants).
        terms.lockstep = ds.len() as f64;
        if c == Collective::AllReduce {
            // Each line's participants send each other their whole buffer.
            terms.sends = ds.iter().map(|d| d.radix as f64 - 1.0).sum();
            terms.bytes_per_send = bytes;
            // Its load of the whole buffer and the sends its credits let
            // through (counted 1.0-1.2 buffers' pieces on 4-64 participants).
            terms.in_flight = InFlight::Sends(1.25);
        }
        terms
    }
}

#[cfg(test)]
mod tests {
    use super::digits;

    #[test]
    fn a_side_over_sixteen_is_cut_in_two_digits_where_it_factors() {
        assert_eq!(digits(16, 1), [(16, 1)]);
        assert_eq!(digits(256, 1), [(16, 1), (16, 16)]);
        assert_eq!(digits(36, 4), [(6, 4), (6, 24)]);
        // The largest divisor up to √40 is 5: runs of 5, then every 5th.
        assert_eq!(digits(40, 1), [(5, 1), (8, 5)]);
        assert_eq!(digits(4096, 1), [(64, 1), (64, 64)]);
        // A prime side stays one line.
        assert_eq!(digits(17, 1), [(17, 1)]);
    }
}
