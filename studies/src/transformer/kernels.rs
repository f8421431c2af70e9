//! The layer's row kernels beyond `crate::ops`: out-of-place layer norm
//! and GELU, the fused scale-mask-softmax, and the backward kernels
//! (softmax's, GELU's, layer norm's). Each is one launch over the shards of
//! its output, like `crate::ops`: the PEs of each cube share the rows of its
//! shard, a tile of whole rows at a time; every input has the output's row
//! blocks on the same cube (a view or a tensor of the same layout).

use crate::gemm::Placement;
use crate::ops::normalize;
use crate::tp::kernels::{element, pieces};
use kernbench_dist::{DistError, Rank, Shard, Tensor, Work};
use kernbench_runtime::kernel::{Addr, Tile, Tl};

/// Elements of one tile: whole rows up to 8 Ki elements (16 KiB), so the
/// few live tiles of the largest kernel (layer norm's backward) stay well
/// inside a PE's TCM.
const TILE_ELEMS: usize = 8 << 10;

/// What a launch computes, per tile of rows.
#[derive(Debug, Clone)]
pub enum RowKernel {
    /// `out = layer_norm(x) · γ + β`; inputs: x, γ, β ((1, cols) rows
    /// whole on every cube).
    LayerNorm { eps: f32 },
    /// `out = gelu(x)`; inputs: x.
    Gelu,
    /// `out = x`; inputs: x.
    Copy,
    /// `out = softmax(out · scale + mask)` in place; inputs: mask (0 or −∞).
    ScaleMaskSoftmax { scale: f32 },
    /// `out = scale · p ⊙ (out − rowsum(out ⊙ p))` in place (softmax's
    /// backward through the scaling, `out` = dP); inputs: p.
    SoftmaxGrad { scale: f32 },
    /// `out = out ⊙ gelu'(x)` in place; inputs: x (GELU's input).
    GeluGrad,
    /// Layer norm's backward plus the residual gradient:
    /// `out = r + (γ ⊙ dz − mean(γ ⊙ dz) − x̂ · mean(γ ⊙ dz ⊙ x̂)) / σ`, and
    /// `dz ⊙ x̂` written to the last input (for ∂γ); inputs: x, γ, dz, r,
    /// the ∂γ rows.
    LayerNormGrad { eps: f32 },
}

/// What [`row_kernel`] is traced with.
struct Args {
    out: Tensor,
    ins: Vec<Tensor>,
    op: RowKernel,
    pes_per_cube: u32,
    /// Which PEs of a cube share its rows.
    placement: Placement,
}

/// Launches `op` over `out`'s rows with `ins` (see [`RowKernel`]), each
/// cube's rows shared by the PEs `placement` names.
pub fn launch_rows(
    ctx: &mut Rank,
    (op, placement): (RowKernel, &Placement),
    out: &Tensor,
    ins: &[&Tensor],
) -> Result<Work, DistError> {
    let ppc = ctx.sip_shape().1;
    let pes = placement.row_sharers(out, ppc);
    let args = Args {
        out: out.clone(),
        ins: ins.iter().map(|t| (*t).clone()).collect(),
        op,
        pes_per_cube: ppc,
        placement: placement.clone(),
    };
    let ins: Vec<Tensor> = args.ins.iter().map(Tensor::timing_view).collect();
    let shape = format!(
        "{:?}",
        (args.out.timing_view(), ins, &args.op, ppc, &args.placement)
    );
    ctx.launch_shaped(row_kernel, &args, &pes, &shape)
}

/// Where row `r` (of a `cols`-wide tile) of `t` lies on `cube`: a row
/// operand's one row (shape (1, _)) broadcast, else the shard holding row r.
fn row_at(t: &Tensor, cube: u32, r: usize) -> Option<(Addr, usize)> {
    let s = t.shards.iter().find(|s| {
        s.cube == cube
            && (t.shape.0 == 1 || (s.block.rows.0..s.block.rows.0 + s.block.rows.1).contains(&r))
    })?;
    let row = if t.shape.0 == 1 { 0 } else { r };
    let pitch = if t.shape.0 == 1 { 0 } else { s.block.cols.1 };
    Some((Addr::At(element(t, s, row, s.block.cols.0)), pitch))
}

/// Loads rows `r .. r + rn` of input `i` on `cube`.
fn load_in(tl: &mut Tl, g: &Args, i: usize, cube: u32, (r, rn): (usize, usize)) -> Option<Tile> {
    let cols = g.out.shape.1;
    let (at, pitch) = row_at(&g.ins[i], cube, r)?;
    Some(tl.load_rect(at, rn, cols, pitch))
}

/// Each of this PE's rows of the output's shard on its cube, a tile at a time.
fn row_kernel(tl: &mut Tl, g: &Args) {
    let (cube, pe) = (tl.program_id(1), tl.program_id(2));
    for s in g.out.shards.iter().filter(|s| s.cube == cube) {
        let Some(mine) = g.placement.rows_of_pe(s.block, g.pes_per_cube, pe) else {
            continue;
        };
        let cols = s.block.cols.1;
        let per_tile = (TILE_ELEMS / cols.max(1)).max(1);
        for (r, rn) in pieces(mine.rows.0, mine.rows.1, per_tile) {
            tile(tl, g, s, (r, rn));
        }
    }
}

/// One tile: rows `r .. r + rn` of the output's shard `s`.
fn tile(tl: &mut Tl, g: &Args, s: &Shard, (r, rn): (usize, usize)) {
    let cols = s.block.cols.1;
    let cube = s.cube;
    let at = Addr::At(element(&g.out, s, r, s.block.cols.0));
    let input = |tl: &mut Tl, i: usize| load_in(tl, g, i, cube, (r, rn));
    let y = match g.op {
        RowKernel::LayerNorm { eps } => {
            let (Some(x), Some(gm), Some(bt)) = (input(tl, 0), input(tl, 1), input(tl, 2)) else {
                return;
            };
            let (normed, _) = normalize(tl, x, cols, eps);
            let scaled = tl.mul(normed, gm);
            tl.add(scaled, bt)
        }
        RowKernel::Gelu => {
            let Some(x) = input(tl, 0) else { return };
            tl.gelu(x)
        }
        RowKernel::Copy => {
            let Some(x) = input(tl, 0) else { return };
            x
        }
        RowKernel::ScaleMaskSoftmax { scale } => {
            let Some(mask) = input(tl, 0) else { return };
            let x = tl.load_rect(at, rn, cols, cols);
            let scaled = tl.scale(x, scale);
            let masked = tl.add(scaled, mask);
            let max = tl.row_max(masked, cols);
            let shifted = tl.row_sub(masked, max, cols);
            let e = tl.exp(shifted);
            let sum = tl.row_sum(e, cols);
            let inv = tl.recip(sum);
            tl.row_mul(e, inv, cols)
        }
        RowKernel::SoftmaxGrad { scale } => {
            let Some(p) = input(tl, 0) else { return };
            let dp = tl.load_rect(at, rn, cols, cols);
            let prod = tl.mul(dp, p);
            let dot = tl.row_sum(prod, cols);
            let centred = tl.row_sub(dp, dot, cols);
            let ds = tl.mul(p, centred);
            tl.scale(ds, scale)
        }
        RowKernel::GeluGrad => {
            let Some(x) = input(tl, 0) else { return };
            let dy = tl.load_rect(at, rn, cols, cols);
            let d = tl.gelu_grad(x);
            tl.mul(dy, d)
        }
        RowKernel::LayerNormGrad { eps } => {
            let (Some(x), Some(gm), Some(dz), Some(res)) =
                (input(tl, 0), input(tl, 1), input(tl, 2), input(tl, 3))
            else {
                return;
            };
            let inv_n = 1.0 / cols as f32;
            let (xhat, inv_std) = normalize(tl, x, cols, eps);
            let dxhat = tl.mul(dz, gm);
            let sum1 = tl.row_sum(dxhat, cols);
            let mean1 = tl.scale(sum1, inv_n);
            let prod = tl.mul(dxhat, xhat);
            let sum2 = tl.row_sum(prod, cols);
            let mean2 = tl.scale(sum2, inv_n);
            let t1 = tl.row_sub(dxhat, mean1, cols);
            let t2 = tl.row_mul(xhat, mean2, cols);
            let t3 = tl.sub(t1, t2);
            let dx = tl.row_mul(t3, inv_std, cols);
            let dgamma_rows = tl.mul(dz, xhat);
            if let Some((gat, pitch)) = row_at(&g.ins[4], cube, r) {
                tl.store_rect(gat, dgamma_rows, rn, cols, pitch);
            }
            tl.add(dx, res)
        }
    };
    tl.store_rect(at, y, rn, cols, cols);
}
