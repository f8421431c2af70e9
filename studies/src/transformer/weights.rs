//! A layer's weights: the whole matrices from a seed (what an f64
//! reference rebuilds), and one TP rank's slices of them on its SIP.

use super::LayerShape;
use crate::tp::{replicated, seeded_matrix};
use kernbench_dist::{DistError, Rank, Tensor};

/// The whole weights of one layer (no biases), row-major, each value an f16.
#[derive(Debug, Clone)]
pub struct FullWeights {
    /// (hidden, hidden) each: Q, K and V projections, head `g` in columns
    /// `g·d .. (g+1)·d` (d = hidden / heads).
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// (hidden, hidden): the output projection.
    pub out: Vec<f32>,
    /// (hidden, ffn_hidden) and (ffn_hidden, hidden).
    pub fc1: Vec<f32>,
    pub fc2: Vec<f32>,
    /// (1, hidden) each: the two layer norms' γ and β.
    pub ln1: (Vec<f32>, Vec<f32>),
    pub ln2: (Vec<f32>, Vec<f32>),
}

/// A layer-norm γ (1 + u/2) or β (u/4), u uniform in [-1, 1), as f16.
fn ln_row(seed: u64, n: usize, gamma: bool) -> Vec<f32> {
    let f = |u: f32| if gamma { 1.0 + u / 2.0 } else { u / 4.0 };
    seeded_matrix(seed, 1, n)
        .into_iter()
        .map(|u| half::f16::from_f32(f(u)).to_f32())
        .collect()
}

impl FullWeights {
    /// Layer `layer`'s weights from `seed` (matrices by `seeded_matrix`).
    pub fn seeded(shape: &LayerShape, seed: u64, layer: usize) -> FullWeights {
        let (h, f) = (shape.hidden, shape.ffn_hidden);
        let s = seed.wrapping_add(16 * layer as u64);
        FullWeights {
            q: seeded_matrix(s, h, h),
            k: seeded_matrix(s + 1, h, h),
            v: seeded_matrix(s + 2, h, h),
            out: seeded_matrix(s + 3, h, h),
            fc1: seeded_matrix(s + 4, h, f),
            fc2: seeded_matrix(s + 5, f, h),
            ln1: (ln_row(s + 6, h, true), ln_row(s + 7, h, false)),
            ln2: (ln_row(s + 8, h, true), ln_row(s + 9, h, false)),
        }
    }
}

/// One TP rank's weights of a layer, each whole on every cube of its SIP
/// (`tp::replicated`), so every cube multiplies its own rows of the
/// activations by its own copy.
pub struct RankWeights {
    /// (hidden, 3 · local heads · d): the fused Q, K and V projections, the
    /// local heads' Q columns, then their K columns, then their V columns.
    pub qkv: Tensor,
    /// (hidden / tp, hidden): this rank's rows of the output projection.
    pub out: Tensor,
    /// (hidden, ffn / tp) and (ffn / tp, hidden).
    pub fc1: Tensor,
    pub fc2: Tensor,
    /// γ and β of each layer norm, (1, hidden).
    pub ln1: (Tensor, Tensor),
    pub ln2: (Tensor, Tensor),
}

/// Columns `lo .. lo + n` of a row-major matrix of `cols` columns.
fn columns(m: &[f32], cols: usize, lo: usize, n: usize) -> Vec<f32> {
    crate::tp::layers::columns(m, cols, lo, n)
}

/// A parameter of `shape` on every cube, filled with `data` when given.
fn param(
    ctx: &mut Rank,
    shape: (usize, usize),
    data: Option<Vec<f32>>,
) -> Result<Tensor, DistError> {
    let cubes = ctx.sip_shape().0;
    let t = ctx.parameter(shape, replicated(cubes))?;
    if let Some(d) = data {
        ctx.write(&t, &d)?;
    }
    Ok(t)
}

impl RankWeights {
    /// Every tensor, to give back.
    pub fn into_tensors(self) -> Vec<Tensor> {
        vec![
            self.qkv, self.out, self.fc1, self.fc2, self.ln1.0, self.ln1.1, self.ln2.0, self.ln2.1,
        ]
    }
    /// TP rank `tp_rank` of `tp`'s slices of `full` (None: timing only,
    /// nothing written).
    pub fn new(
        ctx: &mut Rank,
        shape: &LayerShape,
        (tp_rank, tp): (usize, usize),
        full: Option<&FullWeights>,
    ) -> Result<RankWeights, DistError> {
        let (h, f) = (shape.hidden, shape.ffn_hidden);
        let d = h / shape.heads;
        let local = shape.heads / tp;
        let width = local * d;
        let fused = |w: &FullWeights| {
            let parts = [&w.q, &w.k, &w.v].map(|m| columns(m, h, tp_rank * width, width));
            (0..h)
                .flat_map(|r| {
                    parts
                        .iter()
                        .flat_map(move |p| &p[r * width..(r + 1) * width])
                })
                .copied()
                .collect()
        };
        let qkv = param(ctx, (h, 3 * width), full.map(fused))?;
        let (hr, fr) = (h / tp, f / tp);
        let out = param(
            ctx,
            (hr, h),
            full.map(|w| w.out[tp_rank * hr * h..(tp_rank + 1) * hr * h].to_vec()),
        )?;
        let fc1 = param(
            ctx,
            (h, fr),
            full.map(|w| columns(&w.fc1, f, tp_rank * fr, fr)),
        )?;
        let fc2 = param(
            ctx,
            (fr, h),
            full.map(|w| w.fc2[tp_rank * fr * h..(tp_rank + 1) * fr * h].to_vec()),
        )?;
        let mut row = |r: Option<&Vec<f32>>| param(ctx, (1, h), r.cloned());
        let ln1 = (row(full.map(|w| &w.ln1.0))?, row(full.map(|w| &w.ln1.1))?);
        let ln2 = (row(full.map(|w| &w.ln2.0))?, row(full.map(|w| &w.ln2.1))?);
        Ok(RankWeights {
            qkv,
            out,
            fc1,
            fc2,
            ln1,
            ln2,
        })
    }
}
