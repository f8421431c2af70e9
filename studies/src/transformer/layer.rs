//! One GPT layer on a TP group, forward and backward (docs/model.md
//! §Transformer layer): pre-LN attention and MLP, each a column-parallel
//! GEMM, a local core and a row-parallel GEMM followed by Megatron's g
//! (all-reduce, or reduce-scatter under SP), then the residual.

use super::env::Env;
use super::kernels::RowKernel;
use super::views::{rows, side_by_side};
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
    q: Vec<Tensor>,
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    /// Softmax outputs, (seq, seq) per (sequence, local head), sequence-major.
    probs: Vec<Tensor>,
    ctx: Vec<Tensor>,
    /// The attention block's output buffer (LN2's input in `mine` of it).
    h1: Tensor,
    a2: Tensor,
    f1: Tensor,
    g: Tensor,
}

impl Acts {
    /// Retires every activation (freed once the launches reading them end).
    pub fn retire(self, env: &mut Env) {
        let mut all = vec![self.a1, self.h1, self.a2, self.f1, self.g];
        all.extend(self.q.into_iter().chain(self.k).chain(self.v));
        all.extend(self.probs.into_iter().chain(self.ctx));
        retire_all(env, all);
    }
}

/// Retires a list of tensors.
fn retire_all(env: &mut Env, ts: Vec<Tensor>) {
    ts.into_iter().for_each(|t| env.retire(t));
}

use Operand as O;

impl Layer {
    /// This layer's weight gradients in the order its backward completes
    /// them: fc2, fc1, LN2's γ and β, the output projection, the Q, K and
    /// V heads, LN1's γ and β.
    pub fn grads(&self) -> Vec<Tensor> {
        let g = &self.g;
        let mut out = vec![
            g.fc2.clone(),
            g.fc1.clone(),
            g.ln2.0.clone(),
            g.ln2.1.clone(),
            g.out.clone(),
        ];
        out.extend(g.q.iter().chain(&g.k).chain(&g.v).cloned());
        out.extend([g.ln1.0.clone(), g.ln1.1.clone()]);
        out
    }
    /// The rank's weight slices (filled from `full` when given) and its
    /// gradient tensors (written by the first backward).
    pub fn new(ctx: &mut Rank, env: &Env, full: Option<&FullWeights>) -> Result<Layer, DistError> {
        let w = RankWeights::new(ctx, &env.shape, (env.tp_rank, env.tp), full)?;
        let mut like = |t: &Tensor| env.grad(ctx, t.shape.0, t.shape.1);
        let mut heads = |ts: &[Tensor]| ts.iter().map(&mut like).collect::<Result<Vec<_>, _>>();
        let (q, k, v) = (heads(&w.q)?, heads(&w.k)?, heads(&w.v)?);
        let g = RankWeights {
            q,
            k,
            v,
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

    /// Causal attention of every sequence and local head: ctx_j = softmax(Q·Kᵀ/√d + mask)·V.
    fn attention(
        ctx: &mut Rank,
        env: &mut Env,
        (q, k, v): (&[Tensor], &[Tensor], &[Tensor]),
    ) -> Result<(Vec<Tensor>, Vec<Tensor>), DistError> {
        let (s, d) = (env.shape.seq, env.head_dim());
        let out: Vec<Tensor> = q
            .iter()
            .map(|_| env.act(ctx, env.tokens(), d))
            .collect::<Result<_, _>>()?;
        let scale = 1.0 / (d as f32).sqrt();
        let mut probs = Vec::new();
        for b in 0..env.shape.micro_batch {
            for j in 0..q.len() {
                let p = env.act(ctx, s, s)?;
                let (qb, kb) = (rows(&q[j], b * s, s), rows(&k[j], b * s, s));
                env.gemm(ctx, (O::plain(&qb), O::transposed(&kb)), &p, true)?;
                let mask = env.mask.clone();
                env.rows(ctx, RowKernel::ScaleMaskSoftmax { scale }, &p, &[&mask])?;
                let vb = rows(&v[j], b * s, s);
                env.gemm(
                    ctx,
                    (O::plain(&p), O::plain(&vb)),
                    &rows(&out[j], b * s, s),
                    true,
                )?;
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
        let (t, h, d) = (env.tokens(), env.shape.hidden, env.head_dim());
        let w = &self.w;
        let a1 = Self::norm(ctx, env, x, (&w.ln1.0, &w.ln1.1))?;
        let project = |ctx: &mut Rank, env: &mut Env, ws: &[Tensor]| {
            ws.iter()
                .map(|wj| {
                    let o = env.act(ctx, t, d)?;
                    env.gemm(ctx, (O::plain(&a1), O::plain(wj)), &o, true)?;
                    Ok(o)
                })
                .collect::<Result<Vec<_>, DistError>>()
        };
        let (q, k, v) = (
            project(ctx, env, &w.q)?,
            project(ctx, env, &w.k)?,
            project(ctx, env, &w.v)?,
        );
        let (heads, probs) = Self::attention(ctx, env, (&q, &k, &v))?;
        let h1 = env.act(ctx, t, h)?;
        env.gemm(
            ctx,
            (O::plain(&side_by_side(&heads)), O::plain(&w.out)),
            &h1,
            true,
        )?;
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
            q,
            k,
            v,
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
    /// ∂Q, ∂K, ∂V from ∂ctx.
    fn attention_grad(
        ctx: &mut Rank,
        env: &mut Env,
        a: &Acts,
        dctx: &[Tensor],
    ) -> Result<[Vec<Tensor>; 3], DistError> {
        let (s, d, t) = (env.shape.seq, env.head_dim(), env.tokens());
        let mut new = || -> Result<Vec<Tensor>, DistError> {
            (0..dctx.len()).map(|_| env.act(ctx, t, d)).collect()
        };
        let (dq, dk, dv) = (new()?, new()?, new()?);
        let scale = 1.0 / (d as f32).sqrt();
        for b in 0..env.shape.micro_batch {
            for j in 0..dctx.len() {
                let p = &a.probs[b * dctx.len() + j];
                let r = |t: &Tensor| rows(t, b * s, s);
                let dc = r(&dctx[j]);
                env.gemm(ctx, (O::transposed(p), O::plain(&dc)), &r(&dv[j]), false)?;
                let dp = env.act(ctx, s, s)?;
                env.gemm(ctx, (O::plain(&dc), O::transposed(&r(&a.v[j]))), &dp, false)?;
                env.rows(ctx, RowKernel::SoftmaxGrad { scale }, &dp, &[p])?;
                env.gemm(
                    ctx,
                    (O::plain(&dp), O::plain(&r(&a.k[j]))),
                    &r(&dq[j]),
                    false,
                )?;
                env.gemm(
                    ctx,
                    (O::transposed(&dp), O::plain(&r(&a.q[j]))),
                    &r(&dk[j]),
                    false,
                )?;
                env.retire(dp);
            }
        }
        Ok([dq, dk, dv])
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
        let (t, h, d) = (env.tokens(), env.shape.hidden, env.head_dim());
        let (w, g) = (&self.w, &self.g);
        env.gather(ctx, &dh1)?;
        let mut dctx = Vec::new();
        for j in 0..w.q.len() {
            let o = env.act(ctx, t, d)?;
            env.gemm(
                ctx,
                (O::plain(&dh1), O::transposed(&rows(&w.out, j * d, d))),
                &o,
                false,
            )?;
            dctx.push(o);
        }
        let heads = side_by_side(&a.ctx);
        Self::grad(
            ctx,
            env,
            (O::transposed(&heads), O::plain(&dh1)),
            &g.out,
            fresh,
        )?;
        let [dq, dk, dv] = Self::attention_grad(ctx, env, a, &dctx)?;
        let dqkv: Vec<Tensor> = dq.iter().chain(&dk).chain(&dv).cloned().collect();
        let wqkv: Vec<Tensor> = w.q.iter().chain(&w.k).chain(&w.v).cloned().collect();
        let da1 = env.act(ctx, t, h)?;
        let (dcat, wcat) = (side_by_side(&dqkv), side_by_side(&wqkv));
        env.gemm(ctx, (O::plain(&dcat), O::transposed(&wcat)), &da1, false)?;
        let gqkv: Vec<&Tensor> = g.q.iter().chain(&g.k).chain(&g.v).collect();
        for (dj, gj) in dqkv.iter().zip(gqkv) {
            Self::grad(ctx, env, (O::transposed(&a.a1), O::plain(dj)), gj, fresh)?;
        }
        env.reduce(ctx, &da1)?;
        let dx = Self::norm_grad(
            ctx,
            env,
            (x, &w.ln1.0),
            (&env.mine(&da1), &env.mine(&dh1)),
            (&g.ln1.0, &g.ln1.1),
            fresh,
        )?;
        retire_all(env, [vec![da1, dh1], dctx, dqkv].concat());
        Ok(dx)
    }
}
