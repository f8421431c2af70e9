//! A participant's buffer as element ranges ([`RangeIo`]): what rhd and dims
//! move, ranges cut by the schedule rather than ring blocks.

use super::buffer::split;
use crate::KernelArgs;
use kernbench_runtime::kernel::{Addr, DType, Tile, Tl};
use kernbench_systems::program::QDir;
use std::ops::Range;

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
