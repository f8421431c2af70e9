//! A GPT transformer layer, forward and backward, on a Megatron TP group
//! with optional sequence parallelism and activation recomputation
//! (docs/model.md §Transformer layer). `LayerStack` is what a training
//! schedule drives: `layers` consecutive layers, a micro-batch at a time.
//!
//! Layout on a rank's SIP: activations (tokens, ·) in row blocks over the
//! cubes; weights whole on every cube (`tp::replicated`), so each cube
//! multiplies its own rows with no reduction inside the SIP, and a TP
//! collective runs lane by lane (cube c meets cube c of the other ranks):
//! the SIP links carry Megatron's volumes. Under SP a rank's rows of the LN
//! and residual region are, in each cube's block, the rank's equal run
//! (`views::sequence_shard`), the block an in-place all-gather takes from it.
//!
//! Files: `env` (shared state; GEMM, kernel and collective helpers),
//! `layer` (one layer), `weights`, `kernels` (row kernels), `views`.

mod env;
mod kernels;
mod layer;
pub mod views;
mod weights;

pub use kernels::RowKernel;
pub use weights::FullWeights;

use env::{Env, constants};
use kernbench_dist::{DPPolicy, DistError, Rank, Tensor};
use kernbench_systems::memory::DataMode;
use layer::{Acts, Layer};
use std::collections::BTreeMap;

/// A GPT layer's sizes: hidden h, attention heads, MLP width, sequence s,
/// micro-batch b (tokens = b·s rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    pub hidden: usize,
    pub heads: usize,
    pub ffn_hidden: usize,
    pub seq: usize,
    pub micro_batch: usize,
}

/// Megatron's TP options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TpOptions {
    /// LN and residual sharded on the sequence; all-gather before the
    /// column-parallel GEMMs, reduce-scatter after the row-parallel ones.
    pub sequence_parallel: bool,
    /// Keep only each layer's input; backward re-runs the layer's forward.
    pub recompute: bool,
}

/// What forward keeps of a layer for backward: its input, its output
/// buffer (the next layer's input) and its activations (none under recompute).
struct Saved {
    x: Tensor,
    out: Tensor,
    acts: Option<Acts>,
}

/// Called with a layer's weight gradients as its backward is launched.
pub type LayerGrads<'a> = dyn FnMut(&mut Rank, &[Tensor]) -> Result<(), DistError> + 'a;

/// `layers` consecutive transformer layers on this rank's TP group.
pub struct LayerStack {
    env: Env,
    layers: Vec<Layer>,
    /// What forward kept, per micro-batch, layer by layer.
    saved: BTreeMap<usize, Vec<Saved>>,
    /// The last input gradient returned (freed at the next backward).
    returned: Option<Tensor>,
    /// The weight gradients hold nothing yet (the next backward writes them).
    fresh: bool,
}

/// Refuses a shape the TP group cannot split, naming the field and the fix.
pub fn check(
    shape: &LayerShape,
    tp: usize,
    cubes: usize,
    opts: &TpOptions,
) -> Result<(), DistError> {
    let bad = |m: String| Err(DistError::Config(m));
    let LayerShape {
        hidden,
        heads,
        ffn_hidden,
        seq,
        micro_batch,
    } = *shape;
    if [hidden, heads, ffn_hidden, seq, micro_batch].contains(&0) {
        return bad(format!(
            "transformer layer shape {shape:?}: every size must be at least 1"
        ));
    }
    if !hidden.is_multiple_of(heads) {
        return bad(format!(
            "transformer layer: hidden {hidden} is not divisible by heads {heads}; allowed: heads dividing hidden (each head hidden / heads wide), e.g. heads {}",
            (1..=heads)
                .rev()
                .find(|h| hidden.is_multiple_of(*h))
                .unwrap_or(1)
        ));
    }
    if !heads.is_multiple_of(tp) {
        return bad(format!(
            "transformer layer: heads {heads} is not divisible by the TP size {tp}; allowed: heads a multiple of {tp}, or a TP size dividing {heads}"
        ));
    }
    if !ffn_hidden.is_multiple_of(tp) {
        return bad(format!(
            "transformer layer: ffn_hidden {ffn_hidden} is not divisible by the TP size {tp}; allowed: ffn_hidden a multiple of {tp}"
        ));
    }
    let tokens = seq * micro_batch;
    let per = if opts.sequence_parallel {
        tp * cubes
    } else {
        cubes
    };
    if !tokens.is_multiple_of(per) {
        let why = if opts.sequence_parallel {
            format!(
                "the TP size {tp} × the {cubes} cubes of a SIP (sequence parallelism splits each cube's rows over the TP ranks)"
            )
        } else {
            format!("the {cubes} cubes of a SIP (sip.cube_mesh)")
        };
        return bad(format!(
            "transformer layer: seq {seq} × micro_batch {micro_batch} = {tokens} tokens is not divisible by {per}, {why}; allowed: seq × micro_batch a multiple of {per}"
        ));
    }
    Ok(())
}

impl LayerStack {
    /// Allocates `layers` layers' weights (filled from
    /// [`FullWeights::seeded`]`(shape, seed, l)` in functional runs) and
    /// their gradients on this rank, TP group `tp_group`.
    pub fn new(
        ctx: &mut Rank,
        shape: LayerShape,
        layers: usize,
        tp_group: crate::tp::ModelParallel,
        opts: TpOptions,
        seed: u64,
    ) -> Result<Self, DistError> {
        if layers == 0 {
            return Err(DistError::Config(
                "LayerStack: layers is 0; allowed: at least 1 layer per stack".into(),
            ));
        }
        let tp = tp_group.tp_size() as usize;
        let cubes = ctx.sip_shape().0;
        check(&shape, tp, cubes as usize, &opts)?;
        let functional = ctx.data_mode() == DataMode::Functional;
        let tokens = shape.seq * shape.micro_batch;
        let region = if opts.sequence_parallel {
            tokens / tp
        } else {
            tokens
        };
        let (mask, ones) = constants(ctx, (shape.seq, region), functional)?;
        let env = Env {
            shape,
            opts,
            tp,
            tp_rank: tp_group.tp_rank(ctx.rank()) as usize,
            mp: tp_group,
            cubes,
            mask,
            ones,
            flops: 0,
            counting: false,
            last: None,
            retired: Vec::new(),
        };
        let layers = (0..layers)
            .map(|l| {
                let full = functional.then(|| FullWeights::seeded(&shape, seed, l));
                Layer::new(ctx, &env, full.as_ref())
            })
            .collect::<Result<_, _>>()?;
        Ok(LayerStack {
            env,
            layers,
            saved: BTreeMap::new(),
            returned: None,
            fresh: true,
        })
    }

    /// A tensor laid out as `forward` takes its input and `backward` its
    /// output gradient: (tokens, hidden), or (tokens / tp, hidden) under SP,
    /// row blocks over the cubes.
    pub fn activation(&self, ctx: &mut Rank) -> Result<Tensor, DistError> {
        let (shape, policy) = self.activation_layout();
        ctx.empty(shape, policy)
    }

    /// The shape and layout of [`LayerStack::activation`].
    pub fn activation_layout(&self) -> ((usize, usize), DPPolicy) {
        let shape = (self.env.region_rows(), self.env.shape.hidden);
        (shape, DPPolicy::cube_rows(self.env.cubes))
    }

    /// Refuses an input of the wrong shape or layout.
    fn expect(&self, what: &str, x: &Tensor) -> Result<(), DistError> {
        let (want, layout) = self.activation_layout();
        if x.shape == want && x.policy == layout {
            return Ok(());
        }
        Err(DistError::Layout(format!(
            "LayerStack.{what}: the tensor is {:?} under {}; allowed: {want:?} under {}; create it with LayerStack::activation",
            x.shape,
            x.policy.describe(),
            layout.describe()
        )))
    }

    /// Input activations of one micro-batch → output activations; keeps
    /// what backward needs under `micro`. The output lives until that
    /// micro-batch's backward; `x` must too.
    pub fn forward(
        &mut self,
        ctx: &mut Rank,
        micro: usize,
        x: &Tensor,
    ) -> Result<Tensor, DistError> {
        self.expect("forward", x)?;
        if self.saved.contains_key(&micro) {
            return Err(DistError::Config(format!(
                "LayerStack.forward: micro-batch {micro} already ran forward and awaits its backward; allowed: a micro-batch index not in flight"
            )));
        }
        self.env.counting = true;
        self.env.flops = 0;
        let mut kept = Vec::new();
        let mut cur = x.clone();
        for layer in &self.layers {
            let (out, acts) = layer.forward(ctx, &mut self.env, &cur)?;
            let acts = match self.env.opts.recompute {
                true => {
                    acts.retire(&mut self.env);
                    None
                }
                false => Some(acts),
            };
            let x = std::mem::replace(&mut cur, self.env.mine(&out));
            kept.push(Saved { x, out, acts });
        }
        self.env.counting = false;
        self.env.settle(ctx)?;
        self.saved.insert(micro, kept);
        Ok(cur)
    }

    /// Output gradient → input gradient (valid until the next backward);
    /// accumulates weight gradients; frees what forward kept for `micro`.
    pub fn backward(
        &mut self,
        ctx: &mut Rank,
        micro: usize,
        dy: &Tensor,
    ) -> Result<Tensor, DistError> {
        self.backward_with(ctx, micro, dy, None)
    }

    /// [`LayerStack::backward`] handing each layer's weight gradients to
    /// `done` as soon as that layer's backward has ended (a DP all-reduce
    /// issued on them then overlaps the layers below).
    pub fn backward_with(
        &mut self,
        ctx: &mut Rank,
        micro: usize,
        dy: &Tensor,
        mut done: Option<&mut LayerGrads>,
    ) -> Result<Tensor, DistError> {
        self.expect("backward", dy)?;
        let Some(mut kept) = self.saved.remove(&micro) else {
            return Err(DistError::Config(format!(
                "LayerStack.backward: micro-batch {micro} has no forward in flight; allowed: {:?}",
                self.saved.keys().collect::<Vec<_>>()
            )));
        };
        let mut dy_buf: Option<Tensor> = None;
        let mut cur = dy.clone();
        for (layer, s) in self.layers.iter_mut().zip(kept.drain(..)).rev() {
            let acts = match s.acts {
                Some(a) => a,
                None => {
                    let (again, acts) = layer.forward(ctx, &mut self.env, &s.x)?;
                    self.env.retire(again);
                    acts
                }
            };
            let dx = layer.backward(ctx, &mut self.env, (&s.x, &acts), &cur, self.fresh)?;
            if let Some(done) = done.as_deref_mut() {
                // Work issued on the gradients may run on other PEs than
                // the kernels that write them: they must have ended.
                self.env.settle(ctx)?;
                done(ctx, &layer.grads())?;
            }
            acts.retire(&mut self.env);
            self.env.retire(s.out);
            cur = self.env.mine(&dx);
            if let Some(b) = dy_buf.replace(dx) {
                self.env.retire(b);
            }
        }
        self.fresh = false;
        if let Some(old) = dy_buf.and_then(|b| self.returned.replace(b)) {
            self.env.retire(old);
        }
        self.env.settle(ctx)?;
        Ok(cur)
    }

    /// Gives back the stack's weights, gradients, constants and last input
    /// gradient (after a step every micro-batch's backward has run, so
    /// nothing else is kept).
    pub fn free(mut self, ctx: &mut Rank) -> Result<(), DistError> {
        self.env.settle(ctx)?;
        let mut all = vec![self.env.mask, self.env.ones];
        all.extend(self.returned);
        for l in self.layers {
            all.extend(l.w.into_tensors());
            all.extend(l.g.into_tensors());
        }
        all.into_iter().try_for_each(|t| ctx.free(t))
    }

    /// The next backward writes the weight gradients instead of adding to them.
    pub fn zero_grad(&mut self) {
        self.fresh = true;
    }

    /// Weight-gradient tensors, in the order backward completes them (DP
    /// buckets follow this order): per layer from the last, fc2, fc1, LN2's
    /// γ and β, the output projection, the Q, K and V heads, LN1's γ and β.
    /// Under SP the LN gradients are this rank's rows' sums: as Megatron-LM,
    /// all-reduce them over the TP group before the optimizer step.
    pub fn grads(&self) -> Vec<Tensor> {
        self.layers.iter().rev().flat_map(Layer::grads).collect()
    }

    /// Model FLOPs of one micro-batch's forward through these layers over
    /// the whole TP group (Megatron's count): per layer 8·b·s·h² + 4·b·s²·h
    /// + 4·b·s·h·f, which at f = 4h is 24·b·s·h²·(1 + s/(6h)).
    pub fn forward_flops(&self) -> u64 {
        let LayerShape {
            hidden: h,
            ffn_hidden: f,
            seq: s,
            micro_batch: b,
            ..
        } = self.env.shape;
        let (h, f, s, b) = (h as u64, f as u64, s as u64, b as u64);
        let per_layer = 8 * b * s * h * h + 4 * b * s * s * h + 4 * b * s * h * f;
        per_layer * self.layers.len() as u64
    }

    /// 2·m·n·k summed over the model GEMMs this rank launched in the last
    /// forward (the TP group's sum is [`LayerStack::forward_flops`]).
    pub fn issued_forward_flops(&self) -> u64 {
        self.env.flops
    }
}
