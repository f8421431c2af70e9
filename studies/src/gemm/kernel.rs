//! The tiled GEMM kernel: each PE computes the output tiles of its shard of
//! C, streaming operand tiles from memory by 2-D transfers, double-buffered.

use super::tiling::{Operand, OutTile, ShardRect, TileShape, Worker, plan};
use kernbench_dist::Tensor;
use kernbench_runtime::kernel::{Addr, DType, Tile, Tl};

/// The dtype a GEMM sums its K-step partial products in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accumulate {
    /// Partials held in f32, rounded once to C's dtype when C is stored
    /// (what tensor units do).
    #[default]
    F32,
    /// Each partial rounded to f16 and summed in f16 (error grows with the
    /// number of K steps); the sum is then rounded to C's dtype.
    F16,
}

impl Accumulate {
    /// The dtype of the partials.
    pub fn dtype(self) -> DType {
        match self {
            Accumulate::F32 => DType::F32,
            Accumulate::F16 => DType::F16,
        }
    }
}

/// What every PE of a GEMM launch is traced with.
pub struct GemmArgs {
    pub a: Tensor,
    pub b: Tensor,
    /// A and B are read as their transposes (`Operand::transposed`).
    pub transposed: (bool, bool),
    pub c: Tensor,
    pub tile: TileShape,
    /// Who computes which block of C ([`super::workers`]).
    pub workers: Vec<Worker>,
    /// The dtype K-step partials are summed in.
    pub accumulate: Accumulate,
}

fn load(tl: &mut Tl, r: &ShardRect, dtype: DType) -> Tile {
    let shape = (r.rows, r.cols, r.pitch);
    if r.transposed {
        tl.load_rect_t_as(Addr::At(r.at), shape, dtype)
    } else {
        tl.load_rect_as(Addr::At(r.at), shape, dtype)
    }
}

/// `t` in `dtype`: itself when it is already, else a cast.
fn in_dtype(tl: &mut Tl, t: Tile, dtype: DType) -> Tile {
    if t.dtype == dtype {
        t
    } else {
        tl.cast(t, dtype)
    }
}

/// A product waiting to be folded into its output tile.
struct Product {
    tile: usize,
    step: usize,
    value: Tile,
}

/// Folds a finished product into its tile's accumulator; the last step
/// rounds the sum to C's dtype and stores the tile. Reading the product
/// makes the PE wait for the MAC array to finish it, which is what bounds
/// the operand tiles in flight to two.
fn fold(tl: &mut Tl, tiles: &[OutTile], p: Product, acc: &mut Option<Tile>, c: DType) {
    let t = &tiles[p.tile];
    let (m, n) = (t.c.rows, t.c.cols);
    let sum = match acc.take() {
        None if t.steps.len() == 1 => p.value,
        None => tl.copy(p.value),
        Some(a) => tl.add(a, p.value),
    };
    if p.step + 1 == t.steps.len() {
        let sum = in_dtype(tl, sum, c);
        tl.store_rect(Addr::At(t.c.at), sum, m, n, t.c.pitch);
    } else {
        *acc = Some(sum);
    }
}

/// The GEMM kernel (see the module doc of `gemm`). Op order per step:
/// multiply step i (waits for its operands), fold step i − 1 (waits for the
/// MAC array), then start loading step i + 1 — so the MAC array always has
/// its next operands loading while it works, and no more than two operand
/// pairs are in TCM. A tile of one K step is rounded by the MAC array
/// straight to C's dtype; a tile of several sums its partials in the
/// accumulation dtype and is rounded once when stored.
pub fn gemm_kernel(tl: &mut Tl, g: &GemmArgs) {
    let (cube, pe) = (tl.program_id(1), tl.program_id(2));
    let Some(w) = g.workers.iter().find(|w| w.cube == cube && w.pe == pe) else {
        return;
    };
    let a = Operand {
        t: &g.a,
        transposed: g.transposed.0,
    };
    let b = Operand {
        t: &g.b,
        transposed: g.transposed.1,
    };
    let tiles = plan(a, b, &g.c, w, g.tile);
    let steps: Vec<(usize, usize)> = tiles
        .iter()
        .enumerate()
        .flat_map(|(i, t)| (0..t.steps.len()).map(move |s| (i, s)))
        .collect();
    let operands = |tl: &mut Tl, (i, s): (usize, usize)| {
        let st = &tiles[i].steps[s];
        (load(tl, &st.a, g.a.dtype), load(tl, &st.b, g.b.dtype))
    };
    let c = g.c.dtype;
    let mut next = steps.first().map(|&x| operands(tl, x));
    let (mut waiting, mut acc) = (None, None);
    for (idx, &(i, s)) in steps.iter().enumerate() {
        let (a, b) = next.take().expect("loaded one step ahead");
        let t = &tiles[i];
        let out = if t.steps.len() == 1 {
            c
        } else {
            g.accumulate.dtype()
        };
        let value = tl.gemm_to(a, b, (t.c.rows, t.c.cols, t.steps[s].k), out);
        if let Some(p) = waiting.take() {
            fold(tl, &tiles, p, &mut acc, c);
        }
        if let Some(&x) = steps.get(idx + 1) {
            next = Some(operands(tl, x));
        }
        waiting = Some(Product {
            tile: i,
            step: s,
            value,
        });
    }
    if let Some(p) = waiting {
        fold(tl, &tiles, p, &mut acc, c);
    }
}
