//! hier_lanes' broadcast: pipelined trees over the cube rings and every
//! cube's lanes, so root data reaches each cube at its HBM's rate.
//!
//! The root's buffer is cut into `C` shares (one per cube of a SIP), each
//! in two parts, each part into pieces. Part `d` of share `c` follows one
//! tree, direction `d` throughout (0: east, south and the cube ring's
//! order; 1: the other way round):
//!
//! 1. the root's SIP: a chain around the cube ring from the root through
//!    every cube (every cube of that SIP needs every share);
//! 2. the lanes of cube `c`: from the root's SIP along its row of SIPs,
//!    and from each SIP of that row down its column (a comb);
//! 3. every other SIP: from cube `c` a chain around the cube ring through
//!    the other cubes.
//!
//! So the root SIP's cube ring carries the whole buffer (half each way),
//! each lane only its cube's share, and every other SIP's cube ring all but
//! one share: a scatter (the shares over the lanes) and an all-gather (the
//! cube rings of the other SIPs) pipelined piece by piece. A participant takes
//! the pieces of all its trees in predicted arrival order ([`run_chains`]):
//! a hop adds one piece time (all of a participant's trees advance one piece
//! per piece time), a lane hop the piece times its latency and transfer
//! last, shared among the cube's `C` trees' pieces.

use super::Coords;
use crate::kernels::{Buffer, Chain, ChainKind, run_chains};
use crate::{Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_systems::program::QDir;

/// This participant's place on the trees' paths.
struct PathCoords {
    c: usize,
    /// Cube-ring position of every cube, by cube index.
    ring_pos: Vec<usize>,
    pos: usize,
    cube: usize,
    sx: usize,
    sy: usize,
    w: usize,
    h: usize,
    /// Piece times of one lane hop.
    lane_hop: usize,
}

impl PathCoords {
    /// Hops from cube-ring position `from` to `to` going way `d`.
    fn ring_hops(&self, from: usize, to: usize, d: usize) -> usize {
        let c = self.c;
        if d == 0 {
            (to + c - from) % c
        } else {
            (from + c - to) % c
        }
    }

    /// Hops from the root's SIP along the row, then down the column.
    fn lane_hops(&self, d: usize) -> (usize, usize) {
        let (w, h) = (self.w, self.h);
        if d == 0 {
            (self.sx, self.sy)
        } else {
            ((w - self.sx) % w, (h - self.sy) % h)
        }
    }

    /// This participant's link of tree (`share`, `d`), whose part is cut into
    /// `pieces`.
    fn chain(&self, share: usize, d: usize, pieces: usize) -> Chain {
        let (next, prev) = [(QDir::IntraE, QDir::IntraW), (QDir::IntraW, QDir::IntraE)][d];
        let (east, west) = [
            (QDir::GlobalE, QDir::GlobalW),
            (QDir::GlobalW, QDir::GlobalE),
        ][d];
        let (south, north) = [
            (QDir::GlobalS, QDir::GlobalN),
            (QDir::GlobalN, QDir::GlobalS),
        ][d];
        let last = self.c - 1;
        let at_share = self.ring_hops(0, self.ring_pos[share], d);
        let (dx, dy) = self.lane_hops(d);
        let mut branches = Vec::new();
        let (from, to, offset) = if (self.sx, self.sy) == (0, 0) {
            let hops = self.ring_hops(0, self.pos, d);
            if self.cube == share {
                branches.extend((self.w > 1).then_some(east));
                branches.extend((self.h > 1).then_some(south));
            }
            let from = (self.pos != 0).then_some(prev);
            (from, (hops < last).then_some(next), hops)
        } else if self.cube == share {
            if self.sy == 0 && dx + 1 < self.w {
                branches.push(east);
            }
            if dy + 1 < self.h {
                branches.push(south);
            }
            let from = if self.sy == 0 { west } else { north };
            let to = (self.c > 1).then_some(next);
            (Some(from), to, at_share + (dx + dy) * self.lane_hop)
        } else {
            let hops = self.ring_hops(self.ring_pos[share], self.pos, d);
            let offset = at_share + (dx + dy) * self.lane_hop + hops;
            (Some(prev), (hops < last).then_some(next), offset)
        };
        Chain {
            branches,
            ..Chain::whole(vec![share.into(), d.into()], from, to, offset, pieces)
        }
    }
}

/// The deepest participant of any tree: the cube ring twice, a row and a
/// column.
fn depth(g: &Group) -> usize {
    let c = g.cubes_per_sip() as usize;
    2 * (c - 1) + (g.grid.0 + g.grid.1) as usize - 2
}

pub(super) fn kernel(tl: &mut Tl, a: &KernelArgs, at: &Coords) {
    let g = &a.group;
    if g.size() == 1 {
        return;
    }
    let c = g.cubes_per_sip() as usize;
    let (elems, stages) = (a.job.elems, depth(g).max(1));
    let pieces = a.pieces(elems / (2 * c), stages);
    let buf = Buffer::new(a.buffer(tl), elems, &[c, 2, pieces]);
    let piece_bytes = (elems / (2 * c * pieces)) as u64 * 2;
    let hop = a.piece_limits.hop_in_pieces(piece_bytes);
    let mut ring_pos = vec![0; c];
    for (k, &cube) in at.order.iter().enumerate() {
        ring_pos[cube as usize] = k;
    }
    let place = PathCoords {
        c,
        ring_pos,
        pos: at.pos,
        cube: at.cube,
        sx: at.sx,
        sy: at.sy,
        w: g.grid.0 as usize,
        h: g.grid.1 as usize,
        lane_hop: ((hop / c as f64).ceil() as usize).max(1),
    };
    let chains: Vec<Chain> = (0..c)
        .flat_map(|share| (0..2).map(move |d| (share, d)))
        .map(|(share, d)| place.chain(share, d, pieces))
        .collect();
    run_chains(tl, &buf, ChainKind::Broadcast, &chains, pieces);
}
