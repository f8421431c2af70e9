//! The TP layers' kernels besides GEMM: a bias row added to every row of a
//! matrix, and the masked embedding lookup of a vocabulary slice.

use crate::gemm::Placement;
use kernbench_dist::{Block, Shard, Split, Tensor};
use kernbench_runtime::kernel::{Addr, Tl};
use kernbench_spec::topology::address::{Location, Space};

/// Rows × columns of one bias-add tile: three such tiles (matrix, bias,
/// sum) take 96 KiB of TCM.
const BIAS_TILE: (usize, usize) = (32, 512);

/// Where element (row, col) of the tensor, which shard `s` holds, lives.
pub(crate) fn element(t: &Tensor, s: &Shard, row: usize, col: usize) -> Location {
    let at = (row - s.block.rows.0) * s.block.cols.1 + (col - s.block.cols.0);
    Location {
        space: t.space,
        sip: s.sip,
        cube: s.cube,
        pe: if t.space == Space::Tcm { s.pe } else { 0 },
        offset: s.addr + at as u64 * t.dtype.bytes(),
    }
}

/// The rows of `block` that PE `pe` of `parts` takes.
pub(crate) fn rows_of(block: Block, parts: u32, pe: u32) -> Block {
    block.split(Split::RowWise, parts)[pe as usize]
}

/// PEs that share a block of `rows` rows: one per row, at most a cube's.
pub fn sharing(rows: usize, pes_per_cube: u32) -> u32 {
    pes_per_cube.min(rows as u32).max(1)
}

/// `[lo, lo + n)` in pieces of at most `max`.
pub(crate) fn pieces(lo: usize, n: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    (lo..lo + n)
        .step_by(max)
        .map(move |at| (at, max.min(lo + n - at)))
}

/// What [`bias_add_kernel`] is traced with.
pub struct BiasArgs {
    /// A matrix with one shard per cube (`num_pes` 1).
    pub out: Tensor,
    /// A (1, cols) row; on each cube it is added on, a shard holding the
    /// columns of `out`'s shard there.
    pub bias: Tensor,
    pub pes_per_cube: u32,
    /// Which PEs of each cube share its rows.
    pub placement: Placement,
}

/// `out[r, :] += bias` for every row, on the cubes where `bias` has a shard
/// holding `out`'s columns; the PEs of the cube its placement names share
/// the rows. The bias row is
/// read with a zero pitch, so one transfer broadcasts it over a tile's rows.
pub fn bias_add_kernel(tl: &mut Tl, g: &BiasArgs) {
    let (cube, pe) = (tl.program_id(1), tl.program_id(2));
    let Some(s) = g.out.shards.iter().find(|s| s.cube == cube) else {
        return;
    };
    let (c0, cn) = s.block.cols;
    let holds = |b: &&Shard| b.block.cols.0 <= c0 && c0 + cn <= b.block.cols.0 + b.block.cols.1;
    let Some(b) = g.bias.shards.iter().filter(|b| b.cube == cube).find(holds) else {
        return;
    };
    let Some(mine) = g.placement.rows_of_pe(s.block, g.pes_per_cube, pe) else {
        return;
    };
    let pitch = s.block.cols.1;
    for (r, rn) in pieces(mine.rows.0, mine.rows.1, BIAS_TILE.0) {
        for (c, n) in pieces(c0, cn, BIAS_TILE.1) {
            let at = Addr::At(element(&g.out, s, r, c));
            let x = tl.load_rect_as(at, (rn, n, pitch), g.out.dtype);
            let bias = Addr::At(element(&g.bias, b, 0, c));
            let row = tl.load_rect_as(bias, (rn, n, 0), g.bias.dtype);
            let sum = tl.add(x, row);
            tl.store_rect(at, sum, rn, n, pitch);
        }
    }
}

/// What [`embedding_kernel`] is traced with.
pub struct EmbedArgs {
    /// The rank's vocabulary slice, split by rows over cubes.
    pub table: Tensor,
    /// (tokens, dim), one copy per cube (replicated over cubes).
    pub out: Tensor,
    /// Token ids, global over the whole vocabulary.
    pub ids: Vec<u32>,
    /// The vocabulary id of the slice's first row.
    pub first_id: u32,
    pub pes_per_cube: u32,
}

/// Megatron's masked lookup, per cube: token i's row when its id falls in
/// the cube's part of the vocabulary, else row 0 times zero, written into
/// row i of the cube's copy of `out`. Summing the copies over every cube of
/// every rank (an all-reduce) leaves each token its one row.
pub fn embedding_kernel(tl: &mut Tl, g: &EmbedArgs) {
    let (cube, pe) = (tl.program_id(1), tl.program_id(2));
    let (Some(t), Some(o)) = (
        g.table.shards.iter().find(|s| s.cube == cube),
        g.out.shards.iter().find(|s| s.cube == cube),
    ) else {
        return;
    };
    let dim = g.table.shape.1;
    let parts = sharing(g.ids.len(), g.pes_per_cube);
    let first = u64::from(g.first_id) + t.block.rows.0 as u64;
    for (i, &id) in g
        .ids
        .iter()
        .enumerate()
        .skip(pe as usize)
        .step_by(parts as usize)
    {
        let local = u64::from(id)
            .checked_sub(first)
            .filter(|&r| r < t.block.rows.1 as u64);
        let row = match local {
            Some(r) => tl.load(
                Addr::At(element(&g.table, t, t.block.rows.0 + r as usize, 0)),
                dim,
            ),
            None => {
                let row0 = tl.load(Addr::At(element(&g.table, t, t.block.rows.0, 0)), dim);
                tl.scale(row0, 0.0)
            }
        };
        tl.store(Addr::At(element(&g.out, o, i, 0)), row);
    }
}
