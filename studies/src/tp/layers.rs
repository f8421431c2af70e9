//! Megatron's parallel layers (column and row parallel) and
//! VocabParallelEmbedding, forward only, on the GEMM of `crate::gemm`.
//!
//! Inside a rank the layers go one level further than Megatron: the cubes
//! of its SIP split the local weight again, so the row-parallel GEMM is
//! split-K over cubes and the all-reduce over the TP group's cube leaders
//! sums both levels at once.

use super::kernels::{BiasArgs, EmbedArgs, bias_add_kernel, embedding_kernel, sharing};
use super::{ModelParallel, Timeline, cube_cols, cubes, replicated};
use crate::gemm::{Placement, matmul_placed};
use kernbench_ccl::{Collective, ReduceOp};
use kernbench_dist::{DPPolicy, DistError, Rank, Tensor, Work};

/// Where RowParallelLinear's bias is held and added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BiasPolicy {
    /// Megatron's convention: one copy, on TP rank 0, added once. It is
    /// folded into rank 0's partial sum just before the all-reduce, which
    /// delivers it to every rank: added after the reduce on rank 0 alone,
    /// the ranks would leave the layer with different outputs.
    #[default]
    Rank0,
    /// Every rank holds it and adds it after the all-reduce.
    Replicate,
}

impl BiasPolicy {
    pub fn name(self) -> &'static str {
        match self {
            BiasPolicy::Rank0 => "rank0",
            BiasPolicy::Replicate => "replicate",
        }
    }
}

/// A seeded (rows, cols) matrix, row-major: uniform in [-1, 1) scaled by
/// the power of two nearest 1/√rows (fan-in scaling), each value an f16.
pub fn seeded_matrix(seed: u64, rows: usize, cols: usize) -> Vec<f32> {
    let shift = ((rows.max(1) as f64).sqrt().log2().round()) as i32;
    let scale = 2f32.powi(-shift);
    kernbench_runtime::seeded::uniform(seed, rows * cols)
        .into_iter()
        .map(|v| half::f16::from_f32(v * scale).to_f32())
        .collect()
}

/// Columns `lo..lo + n` of a row-major matrix of `cols` columns.
pub fn columns(m: &[f32], cols: usize, lo: usize, n: usize) -> Vec<f32> {
    m.chunks(cols)
        .flat_map(|r| r[lo..lo + n].to_vec())
        .collect()
}

/// This rank's share of a dimension split over the TP ranks, then over the
/// cubes of its SIP.
struct Shard {
    /// Cubes per SIP.
    cubes: u32,
    /// The share: `len` indices from `first`.
    len: usize,
    first: usize,
}

/// Layer `layer`'s dimension `what` of `whole` split over the TP ranks: this
/// rank's share, which must be whole and cover every cube.
fn shard(
    ctx: &Rank,
    mp: &ModelParallel,
    layer: &str,
    what: &str,
    whole: usize,
) -> Result<Shard, DistError> {
    let cubes = cubes(ctx);
    let parts = mp.tp_size() as usize;
    if !whole.is_multiple_of(parts) || !(whole / parts).is_multiple_of(cubes as usize) {
        return Err(DistError::Config(format!(
            "{layer}: {what} = {whole} over {parts} TP ranks and then the {cubes} cubes of each SIP; allowed: {what} a multiple of {} (TP size × cubes per SIP, sip.cube_mesh), so every cube holds an equal part",
            parts * cubes as usize
        )));
    }
    let len = whole / parts;
    Ok(Shard {
        cubes,
        len,
        first: mp.tp_rank(ctx.rank()) as usize * len,
    })
}

/// Checks that `x` is laid out as `want`.
fn expect(x: &Tensor, want: DPPolicy, what: &str, name: &str) -> Result<(), DistError> {
    if x.policy != want {
        return Err(DistError::Layout(format!(
            "{what}: the input must be {name} (cube {}, pe {} over {} cubes), and it is cube {}, pe {} over {} cubes; create it with tp::{name}",
            want.cube.name(),
            want.pe.name(),
            want.num_cubes,
            x.policy.cube.name(),
            x.policy.pe.name(),
            x.policy.num_cubes
        )));
    }
    Ok(())
}

/// Launches `out[r, :] += bias` on the cubes where `bias` lies, on the PEs
/// `placement` names there.
pub fn bias_add(
    ctx: &mut Rank,
    out: &Tensor,
    bias: &Tensor,
    placement: &Placement,
) -> Result<Work, DistError> {
    let ppc = ctx.sip_shape().1;
    placement.check(ppc)?;
    let mut pes = Vec::new();
    for s in &out.shards {
        if bias.shards.iter().any(|b| b.cube == s.cube) {
            let sharing = placement.sharing(s.block.rows.1, ppc);
            pes.extend(sharing.into_iter().map(|p| (s.cube, p)));
        }
    }
    let args = BiasArgs {
        out: out.clone(),
        bias: bias.clone(),
        pes_per_cube: ppc,
        placement: placement.clone(),
    };
    ctx.launch(bias_add_kernel, &args, &pes)
}

/// [`bias_add`], waited for and timed.
fn add_bias(
    ctx: &mut Rank,
    (out, bias): (&Tensor, &Tensor),
    placement: &Placement,
    time: &mut Timeline,
) -> Result<(), DistError> {
    let w = bias_add(ctx, out, bias, placement)?;
    time.kernel(ctx, w)?;
    Ok(())
}

/// Writes `data` into `t` if the layer is initialised (functional runs).
fn fill(ctx: &mut Rank, t: &Tensor, data: Option<Vec<f32>>) -> Result<(), DistError> {
    match data {
        Some(d) => ctx.write(t, &d),
        None => Ok(()),
    }
}

/// Y = X · W (+ b) with W's columns split over the TP ranks, as Megatron's:
/// X replicated on every rank, Y column-sharded, no communication.
pub struct ColumnParallelLinear {
    pub in_features: usize,
    pub out_features: usize,
    /// (in, out / tp): this rank's columns, split again over its cubes.
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// Which PEs compute (the model parallel state's at `new`).
    pub placement: Placement,
}

impl ColumnParallelLinear {
    /// Allocates the rank's slice; with `init = Some(seed)` fills it from
    /// [`seeded_matrix`]`(seed, in, out)` (bias: `seed + 1`, one row).
    pub fn new(
        ctx: &mut Rank,
        mp: &ModelParallel,
        (in_features, out_features): (usize, usize),
        bias: bool,
        init: Option<u64>,
    ) -> Result<Self, DistError> {
        let Shard {
            cubes: c,
            len: n,
            first: lo,
        } = shard(
            ctx,
            mp,
            "ColumnParallelLinear",
            "out_features",
            out_features,
        )?;
        let weight = ctx.parameter((in_features, n), cube_cols(c))?;
        let w = init.map(|s| {
            columns(
                &seeded_matrix(s, in_features, out_features),
                out_features,
                lo,
                n,
            )
        });
        fill(ctx, &weight, w)?;
        let bias = match bias {
            true => {
                let b = ctx.parameter((1, n), cube_cols(c))?;
                let v = init.map(|s| seeded_matrix(s + 1, 1, out_features)[lo..lo + n].to_vec());
                fill(ctx, &b, v)?;
                Some(b)
            }
            false => None,
        };
        Ok(Self {
            in_features,
            out_features,
            weight,
            bias,
            placement: mp.placement.clone(),
        })
    }

    /// Y = X · W (+ b) for X (tokens, in) replicated over the rank's cubes.
    pub fn forward(
        &self,
        ctx: &mut Rank,
        x: &Tensor,
        time: &mut Timeline,
    ) -> Result<Tensor, DistError> {
        let c = cubes(ctx);
        expect(
            x,
            replicated(c),
            "ColumnParallelLinear.forward",
            "replicated",
        )?;
        let y = ctx.empty((x.shape.0, self.weight.shape.1), cube_cols(c))?;
        let w = matmul_placed(ctx, x, &self.weight, &y, &self.placement)?;
        time.kernel(ctx, w)?;
        if let Some(b) = &self.bias {
            add_bias(ctx, (&y, b), &self.placement, time)?;
        }
        Ok(y)
    }
}

/// Z = all_reduce(X_r · W_r) (+ b) with W's rows split over the TP ranks
/// (Megatron's): X column-sharded as ColumnParallelLinear leaves it, Z
/// replicated on every rank.
pub struct RowParallelLinear {
    pub in_features: usize,
    pub out_features: usize,
    /// (in / tp, out): this rank's rows, split again over its cubes.
    pub weight: Tensor,
    /// (1, out): on TP rank 0's cube 0 (`Rank0`) or every cube (`Replicate`).
    pub bias: Option<(Tensor, BiasPolicy)>,
    /// Which PEs compute (the model parallel state's at `new`).
    pub placement: Placement,
}

impl RowParallelLinear {
    /// Allocates the rank's slice; `init` as in ColumnParallelLinear.
    pub fn new(
        ctx: &mut Rank,
        mp: &ModelParallel,
        (in_features, out_features): (usize, usize),
        bias: Option<BiasPolicy>,
        init: Option<u64>,
    ) -> Result<Self, DistError> {
        let Shard {
            cubes: c,
            len: n,
            first: lo,
        } = shard(ctx, mp, "RowParallelLinear", "in_features", in_features)?;
        let weight = ctx.parameter((n, out_features), DPPolicy::cube_rows(c))?;
        let w = init.map(|s| {
            seeded_matrix(s, in_features, out_features)[lo * out_features..(lo + n) * out_features]
                .to_vec()
        });
        fill(ctx, &weight, w)?;
        let first = mp.tp_rank(ctx.rank()) == 0;
        let bias = match bias.filter(|&p| p == BiasPolicy::Replicate || first) {
            Some(p) => {
                let on = if p == BiasPolicy::Rank0 { 1 } else { c };
                let b = ctx.parameter((1, out_features), replicated(on))?;
                fill(ctx, &b, init.map(|s| seeded_matrix(s + 1, 1, out_features)))?;
                Some((b, p))
            }
            None => None,
        };
        Ok(Self {
            in_features,
            out_features,
            weight,
            bias,
            placement: mp.placement.clone(),
        })
    }

    /// Z for X (tokens, in / tp) column-sharded over the rank's cubes.
    pub fn forward(
        &self,
        ctx: &mut Rank,
        mp: &ModelParallel,
        x: &Tensor,
        time: &mut Timeline,
    ) -> Result<Tensor, DistError> {
        let c = cubes(ctx);
        expect(x, cube_cols(c), "RowParallelLinear.forward", "cube_cols")?;
        let z = ctx.empty((x.shape.0, self.out_features), replicated(c))?;
        let w = matmul_placed(ctx, x, &self.weight, &z, &self.placement)?;
        time.kernel(ctx, w)?;
        if let Some((b, BiasPolicy::Rank0)) = &self.bias {
            add_bias(ctx, (&z, b), &self.placement, time)?;
        }
        super::reduce_from(ctx, mp, &z, time)?;
        if let Some((b, BiasPolicy::Replicate)) = &self.bias {
            add_bias(ctx, (&z, b), &self.placement, time)?;
        }
        Ok(z)
    }
}

/// An embedding table with the vocabulary split over the TP ranks (and
/// each rank's rows over its cubes): a masked local lookup, then an
/// all-reduce.
pub struct VocabParallelEmbedding {
    pub vocab: usize,
    pub dim: usize,
    /// (vocab / tp, dim): this rank's rows.
    pub weight: Tensor,
    /// The vocabulary id of its first row.
    pub first_id: u32,
}

impl VocabParallelEmbedding {
    /// Allocates the rank's rows; `init = Some(seed)` fills them from
    /// [`seeded_matrix`]`(seed, vocab, dim)`.
    pub fn new(
        ctx: &mut Rank,
        mp: &ModelParallel,
        (vocab, dim): (usize, usize),
        init: Option<u64>,
    ) -> Result<Self, DistError> {
        let Shard {
            cubes: c,
            len: n,
            first,
        } = shard(ctx, mp, "VocabParallelEmbedding", "vocab", vocab)?;
        let weight = ctx.parameter((n, dim), DPPolicy::cube_rows(c))?;
        fill(
            ctx,
            &weight,
            init.map(|s| seeded_matrix(s, vocab, dim)[first * dim..(first + n) * dim].to_vec()),
        )?;
        Ok(Self {
            vocab,
            dim,
            weight,
            first_id: first as u32,
        })
    }

    /// The rows of `ids` as a (tokens, dim) tensor replicated over the rank's cubes.
    pub fn forward(
        &self,
        ctx: &mut Rank,
        mp: &ModelParallel,
        ids: &[u32],
        time: &mut Timeline,
    ) -> Result<Tensor, DistError> {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= self.vocab) {
            return Err(DistError::Config(format!(
                "VocabParallelEmbedding.forward: token id {bad} is outside the vocabulary of {}; allowed: ids 0..{}",
                self.vocab, self.vocab
            )));
        }
        let c = cubes(ctx);
        let ppc = ctx.sip_shape().1;
        let out = ctx.empty((ids.len(), self.dim), replicated(c))?;
        let pes: Vec<(u32, u32)> = (0..c)
            .flat_map(|cube| (0..sharing(ids.len(), ppc)).map(move |p| (cube, p)))
            .collect();
        let args = EmbedArgs {
            table: self.weight.clone(),
            out: out.clone(),
            ids: ids.to_vec(),
            first_id: self.first_id,
            pes_per_cube: ppc,
        };
        let w = ctx.launch(embedding_kernel, &args, &pes)?;
        time.kernel(ctx, w)?;
        super::reduce_from(ctx, mp, &out, time)?;
        Ok(out)
    }
}

/// A collective over the rank's TP group, timed. It runs over every cube
/// of every TP rank (the replica reduction, `Tensor::as_replicas`): each
/// cube holds its own partial sum (or block) of the layer's output.
pub(super) fn tp_collective(
    ctx: &mut Rank,
    mp: &ModelParallel,
    c: Collective,
    x: &Tensor,
    op: ReduceOp,
    time: &mut Timeline,
) -> Result<(), DistError> {
    let r = ctx.collective(mp.tp_group(ctx.rank()), c, &x.as_replicas(), op)?;
    time.collective(ctx, r);
    Ok(())
}
