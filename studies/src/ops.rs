//! A transformer layer's vector kernels over a rank's tensor: softmax and
//! layer norm over each row, GELU, and the residual add.
//!
//! Each is one launch, like `tp::bias_add`: on every cube holding shards of
//! the tensor, the PEs its [`Placement`] names share each shard's rows, and
//! every PE runs its rows in tiles of whole shard rows (load, vector ops,
//! store back in place). Softmax is max, subtract, exp, sum, reciprocal and
//! multiply over a row; layer norm is mean, centre, variance, `rsqrt(var +
//! ε)`, normalize, then `· γ + β` with γ and β read with a zero pitch (one
//! row broadcast over the tile's rows). Values are those of the vector ops:
//! computed in f32, rounded to the tensor's dtype after each op. `cast_into`
//! copies a tensor into one of another dtype and the same layout. Row-wise
//! kernels need every shard to hold whole rows.

use crate::gemm::Placement;
use crate::tp::kernels::{element, pieces};
use kernbench_dist::{DistError, Rank, Shard, Split, Tensor, Work};
use kernbench_runtime::kernel::{Addr, Tile, Tl};

/// Elements of one tile: whole rows up to 16 Ki elements (32 KiB), so a
/// kernel's few live tiles stay well inside a PE's TCM.
const TILE_ELEMS: usize = 16 << 10;

/// What a launch computes on each tile.
#[derive(Debug, Clone)]
enum RowOp {
    Softmax,
    LayerNorm {
        gamma: Tensor,
        beta: Tensor,
        eps: f32,
    },
    Gelu,
    ResidualAdd {
        residual: Tensor,
    },
    /// Stored into `out`'s twin shards, rounded to `out`'s dtype.
    Cast {
        out: Tensor,
    },
}

/// What [`rows_kernel`] is traced with.
struct RowsArgs {
    x: Tensor,
    op: RowOp,
    pes_per_cube: u32,
    placement: Placement,
}

/// `softmax` over each row of `x`, in place.
pub fn softmax_rows(ctx: &mut Rank, x: &Tensor, placement: &Placement) -> Result<Work, DistError> {
    whole_rows("softmax_rows", x)?;
    launch(ctx, x, RowOp::Softmax, placement)
}

/// Layer norm over each row of `x`, in place: `(x − mean) / √(var + eps) ·
/// γ + β`, with `gamma` and `beta` (1, cols) rows having a whole copy on
/// every cube that holds a shard of `x`.
pub fn layer_norm_rows(
    ctx: &mut Rank,
    x: &Tensor,
    (gamma, beta): (&Tensor, &Tensor),
    eps: f32,
    placement: &Placement,
) -> Result<Work, DistError> {
    whole_rows("layer_norm_rows", x)?;
    for (name, p) in [("gamma", gamma), ("beta", beta)] {
        beside(name, p, x)?;
    }
    let op = RowOp::LayerNorm {
        gamma: gamma.clone(),
        beta: beta.clone(),
        eps,
    };
    launch(ctx, x, op, placement)
}

/// GELU (tanh form) of every element of `x`, in place.
pub fn gelu(ctx: &mut Rank, x: &Tensor, placement: &Placement) -> Result<Work, DistError> {
    launch(ctx, x, RowOp::Gelu, placement)
}

/// `x += residual`, element by element; `residual` has `x`'s shape and layout.
pub fn residual_add(
    ctx: &mut Rank,
    x: &Tensor,
    residual: &Tensor,
    placement: &Placement,
) -> Result<Work, DistError> {
    same_layout("residual_add", "the residual", (residual, x))?;
    let op = RowOp::ResidualAdd {
        residual: residual.clone(),
    };
    launch(ctx, x, op, placement)
}

/// `out ← x` rounded to `out`'s dtype (f32 master weights to f16, or back),
/// element by element: one vector pass per tile; `out` has `x`'s shape and
/// layout.
pub fn cast_into(
    ctx: &mut Rank,
    x: &Tensor,
    out: &Tensor,
    placement: &Placement,
) -> Result<Work, DistError> {
    same_layout("cast_into", "out", (out, x))?;
    launch(ctx, x, RowOp::Cast { out: out.clone() }, placement)
}

/// Refuses `other` (called `name` in the message) unless it has `x`'s
/// shape and layout, so shards pair up in place.
fn same_layout(what: &str, name: &str, (other, x): (&Tensor, &Tensor)) -> Result<(), DistError> {
    if other.shape == x.shape && other.policy == x.policy {
        return Ok(());
    }
    Err(DistError::Layout(format!(
        "{what}: {name} is {:?} under {} and x is {:?} under {}; allowed: the same shape and layout, so shards pair up in place; create {name} like x",
        other.shape,
        other.policy.describe(),
        x.shape,
        x.policy.describe()
    )))
}

/// The shard of `t` at `s`'s cube, PE and block (its twin in a tensor of the same layout).
fn twin<'a>(t: &'a Tensor, s: &Shard) -> Option<&'a Shard> {
    t.shards
        .iter()
        .find(|u| u.cube == s.cube && u.pe == s.pe && u.block == s.block)
}

/// Refuses a tensor whose shards cut its rows: a row-wise op sees a row only
/// whole on one PE.
fn whole_rows(what: &str, x: &Tensor) -> Result<(), DistError> {
    let Some(s) = x.shards.iter().find(|s| s.block.cols != (0, x.shape.1)) else {
        return Ok(());
    };
    Err(DistError::Layout(format!(
        "{what}: a row-wise op needs whole rows on each shard, and {} splits the {} columns (the shard at cube {}, pe {} holds columns {}..{}); allowed: cube and pe splits {} or {}; lay x out by rows, e.g. DPPolicy::pe_rows or tp::replicated",
        x.policy.describe(),
        x.shape.1,
        s.cube,
        s.pe,
        s.block.cols.0,
        s.block.cols.0 + s.block.cols.1,
        Split::RowWise.name(),
        Split::Replicate.name(),
    )))
}

impl RowOp {
    /// The op with its tensors' [`Tensor::timing_view`]s.
    fn timing_view(&self) -> RowOp {
        match self {
            RowOp::LayerNorm { gamma, beta, eps } => RowOp::LayerNorm {
                gamma: gamma.timing_view(),
                beta: beta.timing_view(),
                eps: *eps,
            },
            RowOp::ResidualAdd { residual } => RowOp::ResidualAdd {
                residual: residual.timing_view(),
            },
            RowOp::Cast { out } => RowOp::Cast {
                out: out.timing_view(),
            },
            RowOp::Softmax => RowOp::Softmax,
            RowOp::Gelu => RowOp::Gelu,
        }
    }
}

/// The shard of `p` on `cube` holding a whole (1, cols) row.
fn row_on(p: &Tensor, cube: u32) -> Option<&Shard> {
    p.shards
        .iter()
        .find(|s| s.cube == cube && s.block.cols == (0, p.shape.1))
}

/// Refuses a parameter row that is not a (1, cols) row whole on every cube of `x`.
fn beside(name: &str, p: &Tensor, x: &Tensor) -> Result<(), DistError> {
    let missing = x.shards.iter().find(|s| row_on(p, s.cube).is_none());
    if p.shape == (1, x.shape.1) && missing.is_none() {
        return Ok(());
    }
    Err(DistError::Layout(format!(
        "layer_norm_rows: {name} is {:?} under {}; allowed: a (1, {}) row with a whole copy on every cube holding x (cube {}); create it with tp::replicated",
        p.shape,
        p.policy.describe(),
        x.shape.1,
        missing.map_or(0, |s| s.cube)
    )))
}

/// Launches `op` over `x` on the PEs `placement` names on each cube holding a shard.
fn launch(ctx: &mut Rank, x: &Tensor, op: RowOp, placement: &Placement) -> Result<Work, DistError> {
    let ppc = ctx.sip_shape().1;
    placement.check(ppc)?;
    let pes = placement.row_sharers(x, ppc);
    let args = RowsArgs {
        x: x.clone(),
        op,
        pes_per_cube: ppc,
        placement: placement.clone(),
    };
    let shape = format!(
        "{:?}",
        (
            args.x.timing_view(),
            args.op.timing_view(),
            ppc,
            &args.placement
        )
    );
    ctx.launch_shaped(rows_kernel, &args, &pes, &shape)
}

/// Each of this PE's rows of every shard on its cube, a tile of whole shard
/// rows at a time: loaded, computed, stored back in place.
fn rows_kernel(tl: &mut Tl, g: &RowsArgs) {
    let (cube, pe) = (tl.program_id(1), tl.program_id(2));
    for s in g.x.shards.iter().filter(|s| s.cube == cube) {
        let Some(mine) = g.placement.rows_of_pe(s.block, g.pes_per_cube, pe) else {
            continue;
        };
        let (c0, cols) = s.block.cols;
        let per_tile = (TILE_ELEMS / cols.max(1)).max(1);
        for (r, rn) in pieces(mine.rows.0, mine.rows.1, per_tile) {
            let at = Addr::At(element(&g.x, s, r, c0));
            let x = tl.load_rect_as(at, (rn, cols, cols), g.x.dtype);
            let y = tile_op(tl, g, (s, r, rn), x);
            let dst = match &g.op {
                RowOp::Cast { out } => twin(out, s).map(|t| Addr::At(element(out, t, r, c0))),
                _ => Some(at),
            };
            if let Some(dst) = dst {
                tl.store_rect(dst, y, rn, cols, cols);
            }
        }
    }
}

/// Layer norm's `x̂` and `1/σ` of a tile of rows of `cols`.
pub(crate) fn normalize(tl: &mut Tl, x: Tile, cols: usize, eps: f32) -> (Tile, Tile) {
    let inv_n = 1.0 / cols as f32;
    let sum = tl.row_sum(x, cols);
    let mean = tl.scale(sum, inv_n);
    let centred = tl.row_sub(x, mean, cols);
    let sq = tl.mul(centred, centred);
    let sq_sum = tl.row_sum(sq, cols);
    let var = tl.scale(sq_sum, inv_n);
    let inv_std = tl.rsqrt(var, eps);
    (tl.row_mul(centred, inv_std, cols), inv_std)
}

/// `g.op` on tile `x`: rows `r .. r + rn` of shard `s`.
fn tile_op(tl: &mut Tl, g: &RowsArgs, (s, r, rn): (&Shard, usize, usize), x: Tile) -> Tile {
    let (c0, cols) = s.block.cols;
    match &g.op {
        RowOp::Softmax => {
            let shifted = {
                let max = tl.row_max(x, cols);
                tl.row_sub(x, max, cols)
            };
            let e = tl.exp(shifted);
            let sum = tl.row_sum(e, cols);
            let inv = tl.recip(sum);
            tl.row_mul(e, inv, cols)
        }
        RowOp::LayerNorm { gamma, beta, eps } => {
            let (normed, _) = normalize(tl, x, cols, *eps);
            // layer_norm_rows checked that both rows lie on every cube of x.
            let (Some(gs), Some(bs)) = (row_on(gamma, s.cube), row_on(beta, s.cube)) else {
                return normed;
            };
            let broadcast = (rn, cols, 0);
            let gm = tl.load_rect_as(Addr::At(element(gamma, gs, 0, 0)), broadcast, gamma.dtype);
            let bt = tl.load_rect_as(Addr::At(element(beta, bs, 0, 0)), broadcast, beta.dtype);
            let scaled = tl.mul(normed, gm);
            tl.add(scaled, bt)
        }
        RowOp::Gelu => tl.gelu(x),
        RowOp::ResidualAdd { residual } => {
            // residual_add checked the layouts are the same: every shard has its twin.
            let Some(twin) = twin(residual, s) else {
                return x;
            };
            let at = Addr::At(element(residual, twin, r, c0));
            let y = tl.load_rect_as(at, (rn, cols, cols), residual.dtype);
            tl.add(x, y)
        }
        RowOp::Cast { out } => tl.cast(x, out.dtype),
    }
}
