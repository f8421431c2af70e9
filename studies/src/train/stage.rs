//! What a pipeline stage is to the schedule ([`Stage`]: forward and
//! backward of one micro-batch on this rank's layers, the weight gradients
//! and the model FLOPs), and the uniform stage: per layer a forward GEMM
//! and two backward GEMMs (input and weight gradient) of fixed shapes, the
//! cost model of schedule studies and of the closed-form tests.

use crate::gemm::{Placement, matmul_placed};
use crate::tp::replicated;
use kernbench_dist::{DPPolicy, DistError, Rank, Tensor};
use kernbench_runtime::seeded;
use kernbench_systems::memory::DataMode;

/// Called with each weight gradient as backward completes it (the DP
/// reduction hooks here).
pub type GradReady<'a> = dyn FnMut(&mut Rank, &Tensor) -> Result<(), DistError> + 'a;

/// A pipeline stage's layers on one rank. The tensors `forward` and
/// `backward` return are the stage's: the caller sends them on but never
/// frees them.
pub trait Stage {
    /// Shape and layout of what the stage takes and hands on (activations
    /// and their gradients alike).
    fn activation(&self) -> ((usize, usize), DPPolicy);
    /// Forward of micro-batch `micro` from its input activation `x` (which
    /// must live until that micro-batch's backward): the output activation
    /// (what goes to the next stage), valid until that backward.
    fn forward(&mut self, ctx: &mut Rank, micro: usize, x: &Tensor) -> Result<Tensor, DistError>;
    /// Backward of micro-batch `micro` from the output gradient `dy`: the
    /// input gradient (what goes to the previous stage), valid until the
    /// next backward. `ready` is given
    /// each weight gradient as it is complete, when this is the last
    /// micro-batch (the gradients are then final).
    fn backward(
        &mut self,
        ctx: &mut Rank,
        micro: usize,
        dy: &Tensor,
        ready: Option<&mut GradReady>,
    ) -> Result<Tensor, DistError>;
    /// The weight gradients, in the order backward completes them.
    fn grads(&self) -> Vec<Tensor>;
    /// Model FLOPs of one micro-batch's forward on this rank.
    fn forward_flops(&self) -> u64;
    /// Gives back the stage's memory at the end of the step.
    fn free(self: Box<Self>, ctx: &mut Rank) -> Result<(), DistError>;
}

/// The shape of a uniform stage on one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UniformShape {
    /// Rows of an activation: micro-batch × sequence.
    pub rows: usize,
    pub hidden: usize,
    /// Layers of the stage.
    pub layers: usize,
    /// Tensor-parallel ranks: each computes `hidden / tp` output columns.
    pub tp: usize,
}

/// Uniform layers: forward `y = x · W` (rows × hidden × hidden/tp), backward
/// `dx = y · Wᵀ` and `dW = xᵀ · y` (the output gradient stands in for `y`,
/// as every layer here has the same shapes). The stage's activations are
/// `rows × hidden` tensors; its values flow only into the weight
/// gradients (seeded inputs and weights in functional mode), so it times a
/// schedule and checks the DP reduction, not a network's numerics.
pub struct UniformStage {
    shape: UniformShape,
    placement: Placement,
    cubes: u32,
    /// Per layer: W (hidden, hidden/tp), Wᵀ (hidden/tp, hidden), dW.
    weights: Vec<[Tensor; 3]>,
    /// xᵀ (hidden, rows): the stashed input, transposed.
    x_t: Tensor,
    /// Per micro-batch and layer: the forward output (rows, hidden/tp).
    outputs: Vec<Vec<Tensor>>,
    /// The activations and gradients handed to the schedule.
    handed: Vec<Tensor>,
    mode: DataMode,
}

impl UniformStage {
    /// Allocates the stage's weights and gradients on the rank (gradients
    /// first, bottom up, in the same order on every rank: the DP
    /// collectives need them at the same offsets); in functional mode
    /// writes weights seeded by `seed` and `xᵀ` by `data_seed`.
    pub fn new(
        ctx: &mut Rank,
        shape: UniformShape,
        placement: Placement,
        (seed, data_seed): (u64, u64),
        mode: DataMode,
    ) -> Result<UniformStage, DistError> {
        let cubes = ctx.sip_shape().0;
        let (h, cols) = (shape.hidden, shape.hidden / shape.tp.max(1));
        let grads = (0..shape.layers)
            .map(|_| ctx.empty((h, cols), DPPolicy::cube_rows(cubes)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut weights = Vec::new();
        for (j, dw) in grads.into_iter().enumerate() {
            let w = ctx.parameter((h, cols), replicated(cubes))?;
            let w_t = ctx.parameter((cols, h), replicated(cubes))?;
            if mode == DataMode::Functional {
                let s = seed.wrapping_add(2 * j as u64);
                ctx.write(&w, &seeded::uniform(s, h * cols))?;
                ctx.write(&w_t, &seeded::uniform(s + 1, h * cols))?;
            }
            weights.push([w, w_t, dw]);
        }
        let x_t = ctx.parameter((h, shape.rows), DPPolicy::cube_rows(cubes))?;
        if mode == DataMode::Functional {
            ctx.write(&x_t, &seeded::uniform(data_seed, h * shape.rows))?;
        }
        Ok(UniformStage {
            shape,
            placement,
            cubes,
            weights,
            x_t,
            outputs: Vec::new(),
            handed: Vec::new(),
            mode,
        })
    }

    fn gemm(&self, ctx: &mut Rank, a: &Tensor, b: &Tensor, c: &Tensor) -> Result<(), DistError> {
        let w = matmul_placed(ctx, a, b, c, &self.placement)?;
        ctx.wait(&w).map(|_| ())
    }

    /// An activation (or activation gradient) the stage hands on: it
    /// carries no values (zeros in functional mode).
    fn hand_on(&mut self, ctx: &mut Rank) -> Result<Tensor, DistError> {
        let (shape, policy) = self.activation();
        let t = ctx.empty(shape, policy)?;
        if self.mode == DataMode::Functional {
            ctx.write(&t, &vec![0.0; t.elems()])?;
        }
        self.handed.push(t.clone());
        Ok(t)
    }
}

impl Stage for UniformStage {
    fn activation(&self) -> ((usize, usize), DPPolicy) {
        (
            (self.shape.rows, self.shape.hidden),
            DPPolicy::cube_rows(self.cubes),
        )
    }

    fn forward(&mut self, ctx: &mut Rank, micro: usize, x: &Tensor) -> Result<Tensor, DistError> {
        let cols = self.shape.hidden / self.shape.tp.max(1);
        while self.outputs.len() <= micro {
            let ys = (0..self.shape.layers)
                .map(|_| ctx.empty((self.shape.rows, cols), DPPolicy::cube_rows(self.cubes)))
                .collect::<Result<Vec<_>, _>>()?;
            self.outputs.push(ys);
        }
        for j in 0..self.shape.layers {
            let y = self.outputs[micro][j].clone();
            self.gemm(ctx, x, &self.weights[j][0].clone(), &y)?;
        }
        self.hand_on(ctx)
    }

    fn backward(
        &mut self,
        ctx: &mut Rank,
        micro: usize,
        _dy: &Tensor,
        mut ready: Option<&mut GradReady>,
    ) -> Result<Tensor, DistError> {
        let dx = self.hand_on(ctx)?;
        let ys = self.outputs.get(micro).cloned().ok_or_else(|| {
            DistError::Config(format!(
                "backward of micro-batch {micro} before its forward; allowed: a micro-batch whose forward ran"
            ))
        })?;
        for j in (0..self.shape.layers).rev() {
            let [_, w_t, dw] = self.weights[j].clone();
            self.gemm(ctx, &ys[j], &w_t, &dx)?;
            self.gemm(ctx, &self.x_t.clone(), &ys[j], &dw)?;
            if let Some(ready) = ready.as_deref_mut() {
                ready(ctx, &dw)?;
            }
        }
        Ok(dx)
    }

    fn grads(&self) -> Vec<Tensor> {
        self.weights.iter().rev().map(|w| w[2].clone()).collect()
    }

    fn free(self: Box<Self>, ctx: &mut Rank) -> Result<(), DistError> {
        let layers = self.weights.into_iter().flatten();
        let outputs = self.outputs.into_iter().flatten().chain(self.handed);
        for t in layers.chain(outputs).chain([self.x_t]) {
            ctx.free(t)?;
        }
        Ok(())
    }

    fn forward_flops(&self) -> u64 {
        let s = self.shape;
        2 * (s.rows * s.hidden * (s.hidden / s.tp.max(1)) * s.layers) as u64
    }
}
