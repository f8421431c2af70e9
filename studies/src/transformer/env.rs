//! What every layer of a stack shares: the shape, the TP group and its
//! options, the mask and ones rows, and the helpers that launch the layer's
//! GEMMs (counting their FLOPs), row kernels and TP collectives.

use super::kernels::{RowKernel, launch_rows};
use super::views::sequence_shard;
use super::{LayerShape, TpOptions};
use crate::gemm::{Operand, matmul_operands};
use crate::tp::{ModelParallel, replicated};
use kernbench_ccl::{Collective, ReduceOp};
use kernbench_dist::{DPPolicy, DistError, Rank, Tensor, Work};

/// The shared state of a stack's layers on one rank.
pub(super) struct Env {
    pub shape: LayerShape,
    pub opts: TpOptions,
    pub mp: ModelParallel,
    pub tp: usize,
    pub tp_rank: usize,
    pub cubes: u32,
    /// (seq, seq): 0 on and below the diagonal, −∞ above (the causal mask).
    pub mask: Tensor,
    /// (1, rows of a rank's LN region) of ones: column sums as a GEMM.
    pub ones: Tensor,
    /// 2·m·n·k of the model GEMMs launched while `counting`.
    pub flops: u64,
    pub counting: bool,
    /// The last launch on the compute stream (collectives wait for it).
    pub last: Option<Work>,
    /// Tensors no longer needed, freed once the launches that read them end.
    pub retired: Vec<Tensor>,
}

impl Env {
    /// Tokens of a micro-batch: b · s rows.
    pub fn tokens(&self) -> usize {
        self.shape.micro_batch * self.shape.seq
    }

    /// Rows a rank holds in the LN and residual region (tokens / tp under SP).
    pub fn region_rows(&self) -> usize {
        if self.opts.sequence_parallel {
            self.tokens() / self.tp
        } else {
            self.tokens()
        }
    }

    /// Head width d = hidden / heads.
    pub fn head_dim(&self) -> usize {
        self.shape.hidden / self.shape.heads
    }

    /// Heads on this rank: heads / tp.
    pub fn local_heads(&self) -> usize {
        self.shape.heads / self.tp
    }

    /// A (rows, cols) activation, row blocks over the cubes.
    pub fn act(&self, ctx: &mut Rank, rows: usize, cols: usize) -> Result<Tensor, DistError> {
        ctx.empty(
            (rows, cols),
            DPPolicy::cube_rows(self.cubes.min(rows as u32)),
        )
    }

    /// A (rows, cols) weight gradient: rows over the most cubes that divide
    /// them evenly (equal lanes for a data-parallel all-reduce).
    pub fn grad(&self, ctx: &mut Rank, rows: usize, cols: usize) -> Result<Tensor, DistError> {
        let (split, n) = if rows == 1 {
            (false, cols)
        } else {
            (true, rows)
        };
        let parts = (1..=self.cubes)
            .rev()
            .find(|&c| n.is_multiple_of(c as usize))
            .unwrap_or(1);
        let policy = if split {
            DPPolicy::cube_rows(parts)
        } else {
            crate::tp::cube_cols(parts)
        };
        ctx.parameter((rows, cols), policy)
    }

    /// The rank's rows of a full (tokens, h) buffer in the LN region.
    pub fn mine(&self, full: &Tensor) -> Tensor {
        if self.opts.sequence_parallel {
            sequence_shard(full, self.tp_rank, self.tp)
        } else {
            full.clone()
        }
    }

    /// C = A · B on the rank's PEs; a model GEMM adds 2·m·n·k to `flops`
    /// while counting.
    pub fn gemm(
        &mut self,
        ctx: &mut Rank,
        (a, b): (Operand, Operand),
        c: &Tensor,
        model: bool,
    ) -> Result<(), DistError> {
        if model && self.counting {
            let (m, k) = a.shape();
            self.flops += 2 * (m * k * b.shape().1) as u64;
        }
        self.last = Some(matmul_operands(ctx, a, b, c, &self.mp.placement)?);
        Ok(())
    }

    /// A row kernel over `out`.
    pub fn rows(
        &mut self,
        ctx: &mut Rank,
        op: RowKernel,
        out: &Tensor,
        ins: &[&Tensor],
    ) -> Result<(), DistError> {
        self.last = Some(launch_rows(ctx, (op, &self.mp.placement), out, ins)?);
        Ok(())
    }

    /// `x += y`, the residual add.
    pub fn add(&mut self, ctx: &mut Rank, x: &Tensor, y: &Tensor) -> Result<(), DistError> {
        self.last = Some(crate::ops::residual_add(ctx, x, y, &self.mp.placement)?);
        Ok(())
    }

    /// Frees `t` once the launches before now have ended.
    pub fn retire(&mut self, t: Tensor) {
        self.retired.push(t);
    }

    /// Waits for the last launch (so every earlier one on the stream), then
    /// frees the retired tensors.
    pub fn settle(&mut self, ctx: &mut Rank) -> Result<(), DistError> {
        if let Some(w) = self.last.take() {
            ctx.wait(&w)?;
        }
        self.retired.drain(..).try_for_each(|t| ctx.free(t))
    }

    /// A TP collective on a full buffer, after the launches before it.
    fn collective(&mut self, ctx: &mut Rank, c: Collective, t: &Tensor) -> Result<(), DistError> {
        self.settle(ctx)?;
        let group = self.mp.tp_group(ctx.rank());
        ctx.collective(group, c, t, ReduceOp::Sum)?;
        Ok(())
    }

    /// Megatron's g after a row-parallel GEMM: all-reduce, or under SP
    /// reduce-scatter (the rank's rows of the sum land in `mine(t)`).
    pub fn reduce(&mut self, ctx: &mut Rank, t: &Tensor) -> Result<(), DistError> {
        match (self.tp, self.opts.sequence_parallel) {
            (1, _) => Ok(()),
            (_, false) => self.collective(ctx, Collective::AllReduce, t),
            (_, true) => self.collective(ctx, Collective::ReduceScatter, t),
        }
    }

    /// Under SP, the all-gather before a column-parallel GEMM: every rank's
    /// `mine(t)` reaches all of `t`. Nothing without SP.
    pub fn gather(&mut self, ctx: &mut Rank, t: &Tensor) -> Result<(), DistError> {
        if self.tp == 1 || !self.opts.sequence_parallel {
            return Ok(());
        }
        self.collective(ctx, Collective::AllGather, t)
    }
}

/// The causal mask and the ones row, filled in functional runs.
pub(super) fn constants(
    ctx: &mut Rank,
    (seq, region_rows): (usize, usize),
    functional: bool,
) -> Result<(Tensor, Tensor), DistError> {
    let cubes = ctx.sip_shape().0;
    let mask = ctx.parameter((seq, seq), DPPolicy::cube_rows(cubes.min(seq as u32)))?;
    let ones = ctx.parameter((1, region_rows), replicated(cubes))?;
    if functional {
        let m: Vec<f32> = (0..seq * seq)
            .map(|i| {
                if i % seq > i / seq {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        ctx.write(&mask, &m)?;
        ctx.write(&ones, &vec![1.0; region_rows])?;
    }
    Ok((mask, ones))
}
