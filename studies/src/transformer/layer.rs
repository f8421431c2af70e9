//! One GPT layer on a TP group, forward and backward (docs/model.md
//! §Transformer layer): pre-LN attention and MLP, each a column-parallel
//! GEMM, a local core and a row-parallel GEMM followed by Megatron's g
//! (all-reduce, or reduce-scatter under SP), then the residual.

use super::env::Env;
use super::kernels::RowKernel;
use super::views::{columns, rows};
use super::weights::{FullWeights, RankWeights};
use crate::gemm::Operand;
use kernbench_dist::{DistError, Rank, Tensor};

const LN_EPS: f32 = 1e-5;

/// A layer's weights and weight gradients on this rank.
pub(super) struct Layer {
    pub w: RankWeights,
    /// Same tensors as `w`'s, gradient layout ([`Env::grad`]).
    pub g: RankWeights,
}

/// The activations backward reads.
pub(super) struct Acts {
    a1: Tensor,
    /// (tokens, 3 · local heads · d): the fused projection's output.
    qkv: Tensor,
    /// Softmax outputs, (seq, seq) per (sequence, local head), sequence-major.
    probs: Vec<Tensor>,
    /// (tokens, local heads · d): the heads' outputs side by side.
    ctx: Tensor,
    /// The attention block's output buffer (LN2's input in `mine` of it).
    h1: Tensor,
    a2: Tensor,
    f1: Tensor,
    g: Tensor,
}

impl Acts {
    /// Retires every activation (freed once the launches reading them end).
    pub fn retire(self, env: &mut Env) {
        let mut all = vec![
            self.a1, self.qkv, self.ctx, self.h1, self.a2, self.f1, self.g,
        ];
        all.extend(self.probs);
        retire_all(env, all);
    }
}

/// Retires a list of tensors.
fn retire_all(env: &mut Env, ts: Vec<Tensor>) {
    ts.into_iter().for_each(|t| env.retire(t));
}

use Operand as O;

/// Head `j`'s columns of a fused (tokens, 3 · heads · d) Q, K, V tensor:
/// its Q, K and V.
fn head_qkv(qkv: &Tensor, heads: usize, d: usize, j: usize) -> [Tensor; 3] {
    [0, 1, 2].map(|part| columns(qkv, (part * heads + j) * d, d))
}

impl Layer {
    /// This layer's weight gradients in the order its backward completes
    /// them: fc2, fc1, LN2's γ and β, the output projection, the fused
    /// QKV projection, LN1's γ and β.
    pub fn grads(&self) -> Vec<Tensor> {
        let g = &self.g;
        [
            &g.fc2, &g.fc1, &g.ln2.0, &g.ln2.1, &g.out, &g.qkv, &g.ln1.0, &g.ln1.1,
        ]
        .map(Tensor::clone)
        .to_vec()
    }
    /// The rank's weight slices (filled from `full` when given) and its
    /// gradient tensors (written by the first backward).
    pub fn new(ctx: &mut Rank, env: &Env, full: Option<&FullWeights>) -> Result<Layer, DistError> {
        let w = RankWeights::new(ctx, &env.shape, (env.tp_rank, env.tp), full)?;
        let mut like = |t: &Tensor| env.grad(ctx, t.shape.0, t.shape.1);
        let g = RankWeights {
            qkv: like(&w.qkv)?,
            out: like(&w.out)?,
            fc1: like(&w.fc1)?,
            fc2: like(&w.fc2)?,
            ln1: (like(&w.ln1.0)?, like(&w.ln1.1)?),
            ln2: (like(&w.ln2.0)?, like(&w.ln2.1)?),
        };
        Ok(Layer { w, g })
    }

    /// LN → all-gather (SP) into a new full buffer: a column-parallel GEMM's input.
    fn norm(
        ctx: &mut Rank,
        env: &mut Env,
        x: &Tensor,
        (gamma, beta): (&Tensor, &Tensor),
    ) -> Result<Tensor, DistError> {
        let full = env.act(ctx, env.tokens(), env.shape.hidden)?;
        let op = RowKernel::LayerNorm { eps: LN_EPS };
        env.rows(ctx, op, &env.mine(&full), &[x, gamma, beta])?;
        env.gather(ctx, &full)?;
        Ok(full)
    }

    /// Causal attention of every sequence and local head of the fused
    /// projection's output: head j's columns of the result are
    /// softmax(Q_j·K_jᵀ/√d + mask)·V_j.
    fn attention(
        ctx: &mut Rank,
        env: &mut Env,
        qkv: &Tensor,
    ) -> Result<(Tensor, Vec<Tensor>), DistError> {
        let (s, d, heads) = (env.shape.seq, env.head_dim(), env.local_heads());
        let out = env.act(ctx, env.tokens(), heads * d)?;
        let scale = 1.0 / (d as f32).sqrt();
        let mut probs = Vec::new();
        for b in 0..env.shape.micro_batch {
            for j in 0..heads {
                let [q, k, v] = head_qkv(qkv, heads, d, j).map(|t| rows(&t, b * s, s));
                let p = env.act(ctx, s, s)?;
                env.gemm(ctx, (O::plain(&q), O::transposed(&k)), &p, true)?;
                let mask = env.mask.clone();
                env.rows(ctx, RowKernel::ScaleMaskSoftmax { scale }, &p, &[&mask])?;
                let head_out = rows(&columns(&out, j * d, d), b * s, s);
                env.gemm(ctx, (O::plain(&p), O::plain(&v)), &head_out, true)?;
                probs.push(p);
            }
        }
        Ok((out, probs))
    }

    /// x → the layer's output buffer (the output is `env.mine` of it), and
    /// the activations backward reads.
    pub fn forward(
        &self,
        ctx: &mut Rank,
        env: &mut Env,
        x: &Tensor,
    ) -> Result<(Tensor, Acts), DistError> {
        let (t, h) = (env.tokens(), env.shape.hidden);
        let w = &self.w;
        let a1 = Self::norm(ctx, env, x, (&w.ln1.0, &w.ln1.1))?;
        let qkv = env.act(ctx, t, w.qkv.shape.1)?;
        env.gemm(ctx, (O::plain(&a1), O::plain(&w.qkv)), &qkv, true)?;
        let (heads, probs) = Self::attention(ctx, env, &qkv)?;
        let h1 = env.act(ctx, t, h)?;
        env.gemm(ctx, (O::plain(&heads), O::plain(&w.out)), &h1, true)?;
        env.reduce(ctx, &h1)?;
        env.add(ctx, &env.mine(&h1), x)?;
        let a2 = Self::norm(ctx, env, &env.mine(&h1), (&w.ln2.0, &w.ln2.1))?;
        let f1 = env.act(ctx, t, w.fc1.shape.1)?;
        env.gemm(ctx, (O::plain(&a2), O::plain(&w.fc1)), &f1, true)?;
        let g = env.act(ctx, t, w.fc1.shape.1)?;
        env.rows(ctx, RowKernel::Gelu, &g, &[&f1])?;
        let out = env.act(ctx, t, h)?;
        env.gemm(ctx, (O::plain(&g), O::plain(&w.fc2)), &out, true)?;
        env.reduce(ctx, &out)?;
        env.add(ctx, &env.mine(&out), &env.mine(&h1))?;
        let acts = Acts {
            a1,
            qkv,
            probs,
            ctx: heads,
            h1,
            a2,
            f1,
            g,
        };
        Ok((out, acts))
    }

    /// A weight gradient `into` += a · b: written when `fresh`, else the
    /// product goes to a scratch tensor that a residual add folds in.
    fn grad(
        ctx: &mut Rank,
        env: &mut Env,
        (a, b): (Operand, Operand),
        into: &Tensor,
        fresh: bool,
    ) -> Result<(), DistError> {
        if fresh {
            return env.gemm(ctx, (a, b), into, false);
        }
        let tmp = env.grad(ctx, into.shape.0, into.shape.1)?;
        env.gemm(ctx, (a, b), &tmp, false)?;
        env.add(ctx, into, &tmp)?;
        env.retire(tmp);
        Ok(())
    }

    /// Layer norm's backward with the residual's gradient `res`: writes
    /// `mine(dx_full)` and accumulates ∂γ, ∂β (this rank's rows' sums).
    fn norm_grad(
        ctx: &mut Rank,
        env: &mut Env,
        (x, gamma): (&Tensor, &Tensor),
        (dz, res): (&Tensor, &Tensor),
        (dgamma, dbeta): (&Tensor, &Tensor),
        fresh: bool,
    ) -> Result<Tensor, DistError> {
        let (t, h) = (env.tokens(), env.shape.hidden);
        let dx = env.act(ctx, t, h)?;
        let z = env.act(ctx, env.region_rows(), h)?;
        let op = RowKernel::LayerNormGrad { eps: LN_EPS };
        env.rows(ctx, op, &env.mine(&dx), &[x, gamma, dz, res, &z])?;
        let ones = env.ones.clone();
        Self::grad(ctx, env, (O::plain(&ones), O::plain(&z)), dgamma, fresh)?;
        Self::grad(ctx, env, (O::plain(&ones), O::plain(dz)), dbeta, fresh)?;
        env.retire(z);
        Ok(dx)
    }

    /// The attention core's backward for every sequence and local head:
    /// the fused ∂Q, ∂K, ∂V (as the projection's output is laid out) from
    /// ∂ctx (as the heads' outputs are).
    fn attention_grad(
        ctx: &mut Rank,
        env: &mut Env,
        a: &Acts,
        dctx: &Tensor,
    ) -> Result<Tensor, DistError> {
        let (s, d, heads) = (env.shape.seq, env.head_dim(), env.local_heads());
        let dqkv = env.act(ctx, env.tokens(), a.qkv.shape.1)?;
        let scale = 1.0 / (d as f32).sqrt();
        for b in 0..env.shape.micro_batch {
            for j in 0..heads {
                let p = &a.probs[b * heads + j];
                let r = |t: Tensor| rows(&t, b * s, s);
                let [q, k, v] = head_qkv(&a.qkv, heads, d, j).map(r);
                let [dq, dk, dv] = head_qkv(&dqkv, heads, d, j).map(r);
                let dc = r(columns(dctx, j * d, d));
                env.gemm(ctx, (O::transposed(p), O::plain(&dc)), &dv, false)?;
                let dp = env.act(ctx, s, s)?;
                env.gemm(ctx, (O::plain(&dc), O::transposed(&v)), &dp, false)?;
                env.rows(ctx, RowKernel::SoftmaxGrad { scale }, &dp, &[p])?;
                env.gemm(ctx, (O::plain(&dp), O::plain(&k)), &dq, false)?;
                env.gemm(ctx, (O::transposed(&dp), O::plain(&q)), &dk, false)?;
                env.retire(dp);
            }
        }
        Ok(dqkv)
    }

    /// dy (the rank's rows of the output's gradient) → the input
    /// gradient's full buffer (`mine` of it is the rank's), accumulating
    /// the weight gradients. `fresh`: the first backward since they were zeroed.
    pub fn backward(
        &mut self,
        ctx: &mut Rank,
        env: &mut Env,
        (x, a): (&Tensor, &Acts),
        dy: &Tensor,
        fresh: bool,
    ) -> Result<Tensor, DistError> {
        let (t, h) = (env.tokens(), env.shape.hidden);
        let (w, g) = (&self.w, &self.g);
        // MLP: f = all-gather (SP) of dy, then fc2's and fc1's gradients.
        let dyf = match env.opts.sequence_parallel {
            true => {
                let f = env.act(ctx, t, h)?;
                env.rows(ctx, RowKernel::Copy, &env.mine(&f), &[dy])?;
                env.gather(ctx, &f)?;
                Some(f)
            }
            false => None,
        };
        let dyf_t = dyf.as_ref().unwrap_or(dy);
        let dg = env.act(ctx, t, w.fc2.shape.0)?;
        env.gemm(ctx, (O::plain(dyf_t), O::transposed(&w.fc2)), &dg, false)?;
        Self::grad(
            ctx,
            env,
            (O::transposed(&a.g), O::plain(dyf_t)),
            &g.fc2,
            fresh,
        )?;
        env.rows(ctx, RowKernel::GeluGrad, &dg, &[&a.f1])?;
        let da2 = env.act(ctx, t, h)?;
        env.gemm(ctx, (O::plain(&dg), O::transposed(&w.fc1)), &da2, false)?;
        Self::grad(
            ctx,
            env,
            (O::transposed(&a.a2), O::plain(&dg)),
            &g.fc1,
            fresh,
        )?;
        env.reduce(ctx, &da2)?;
        let dh1 = Self::norm_grad(
            ctx,
            env,
            (&env.mine(&a.h1), &w.ln2.0),
            (&env.mine(&da2), dy),
            (&g.ln2.0, &g.ln2.1),
            fresh,
        )?;
        retire_all(
            env,
            [Some(dg), Some(da2), dyf].into_iter().flatten().collect(),
        );
        self.attention_backward(ctx, env, (x, a), dh1, fresh)
    }

    /// The attention block's backward from ∂h1's full buffer.
    fn attention_backward(
        &mut self,
        ctx: &mut Rank,
        env: &mut Env,
        (x, a): (&Tensor, &Acts),
        dh1: Tensor,
        fresh: bool,
    ) -> Result<Tensor, DistError> {
        let (t, h) = (env.tokens(), env.shape.hidden);
        let (w, g) = (&self.w, &self.g);
        env.gather(ctx, &dh1)?;
        let dctx = env.act(ctx, t, a.ctx.shape.1)?;
        env.gemm(ctx, (O::plain(&dh1), O::transposed(&w.out)), &dctx, false)?;
        let heads = (O::transposed(&a.ctx), O::plain(&dh1));
        Self::grad(ctx, env, heads, &g.out, fresh)?;
        let dqkv = Self::attention_grad(ctx, env, a, &dctx)?;
        let da1 = env.act(ctx, t, h)?;
        env.gemm(ctx, (O::plain(&dqkv), O::transposed(&w.qkv)), &da1, false)?;
        let dw = (O::transposed(&a.a1), O::plain(&dqkv));
        Self::grad(ctx, env, dw, &g.qkv, fresh)?;
        env.reduce(ctx, &da1)?;
        let dx = Self::norm_grad(
            ctx,
            env,
            (x, &w.ln1.0),
            (&env.mine(&da1), &env.mine(&dh1)),
            (&g.ln1.0, &g.ln1.1),
            fresh,
        )?;
        retire_all(env, vec![da1, dh1, dctx, dqkv]);
        Ok(dx)
    }
}
