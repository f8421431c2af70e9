//! One transformer block's forward pass with Megatron's tensor parallelism,
//! timed (weights and activations are not filled: timing only): QKV
//! column-parallel, attention output row-parallel (an all-reduce), MLP
//! column → row (an all-reduce). The attention core (scores, softmax,
//! scores · V) is local to each rank's heads and is not modelled: the
//! attention-output layer reads a (tokens, hidden / tp) input in its place.

use super::{
    BiasPolicy, Breakdown, ColumnParallelLinear, RowParallelLinear, Timeline, cube_cols,
    initialize_model_parallel, replicated,
};
use crate::autotune::init_process_group_cached;
use kernbench_ccl::CclConfig;
use kernbench_dist::DistError;
use kernbench_spec::spec::System;
use kernbench_systems::memory::DataMode;
use std::path::Path;
use std::sync::Mutex;

/// Tokens (sequence × micro-batch) and the model width; the MLP is 4× wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockShape {
    pub tokens: usize,
    pub hidden: usize,
}

/// Rank 0's breakdown of one block, the ticks of its two all-reduces and
/// the configuration each ran.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockReport {
    pub breakdown: Breakdown,
    pub allreduce_ticks: Vec<u64>,
    pub allreduce_configs: Vec<String>,
}

/// Runs one block with TP = `tp` on every rank of `sys` (DP = SIPs / tp),
/// its all-reduces on ccl entry `algorithm` (under `auto`, the tuner's
/// picks, with decisions read from and stored in `autotune_cache` if given).
pub fn run_block(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    tp: u32,
    shape: BlockShape,
    autotune_cache: Option<&Path>,
) -> Result<BlockReport, DistError> {
    let mut pg =
        init_process_group_cached(sys, ccl, algorithm, DataMode::TimingOnly, autotune_cache)?;
    let mp = initialize_model_parallel(&mut pg, tp)?;
    let (h, s) = (shape.hidden, shape.tokens);
    let cubes = sys.cubes_per_sip();
    let report = Mutex::new(None);
    let world = pg.world_size;
    pg.spawn(world, |ctx| {
        let bias = Some(BiasPolicy::Rank0);
        let qkv = ColumnParallelLinear::new(ctx, &mp, (h, 3 * h), true, None)?;
        let proj = RowParallelLinear::new(ctx, &mp, (h, h), bias, None)?;
        let fc1 = ColumnParallelLinear::new(ctx, &mp, (h, 4 * h), true, None)?;
        let fc2 = RowParallelLinear::new(ctx, &mp, (4 * h, h), bias, None)?;
        let x = ctx.empty((s, h), replicated(cubes))?;
        let attn = ctx.empty((s, h / tp as usize), cube_cols(cubes))?;
        let mut time = Timeline::start(ctx);
        let q = qkv.forward(ctx, &x, &mut time)?;
        let y = proj.forward(ctx, &mp, &attn, &mut time)?;
        let f = fc1.forward(ctx, &y, &mut time)?;
        let z = fc2.forward(ctx, &mp, &f, &mut time)?;
        if ctx.rank() == 0 {
            *report.lock().unwrap() = Some(BlockReport {
                breakdown: time.breakdown(ctx),
                allreduce_ticks: time.collective_ticks(),
                allreduce_configs: time.collective_configs(),
            });
        }
        for t in [q, y, f, z, attn, x] {
            ctx.free(t)?;
        }
        Ok(())
    })?;
    Ok(report.into_inner().unwrap().expect("rank 0 reports"))
}
