//! A data-parallel step's backward, as PyTorch DDP runs it: each rank
//! computes its gradient buckets by GEMMs (one after another on its
//! compute stream) and all-reduces each bucket over the ranks, either
//! asynchronously as soon as its GEMM is done (overlapped) or each in turn
//! after the whole backward (serialized). Its breakdown says how much of
//! the communication the compute hid, measured from when each kernel and
//! each collective ran (docs/model.md §Streams).

use crate::gemm::{Placement, matmul_placed};
use crate::tp::{Breakdown, Timeline, replicated};
use kernbench_ccl::ReduceOp;
use kernbench_dist::{DPPolicy, DistError, ProcessGroup, Tensor, Work};
use kernbench_systems::Tick;
use std::sync::Mutex;

/// Columns of a gradient bucket (and of its GEMM's B).
pub const BUCKET_COLS: usize = 512;

/// One DDP backward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdpStep {
    /// Gradient buckets per rank.
    pub buckets: usize,
    /// Bytes of each bucket (f16, `BUCKET_COLS` columns, its rows split
    /// over the SIP's cubes).
    pub bucket_bytes: u64,
    /// The inner dimension of each bucket's GEMM: bucket (m, n) = A (m, k) · B (k, n).
    pub k: usize,
    /// Which PEs of each cube compute the GEMMs.
    pub placement: Placement,
    /// All-reduce each bucket as soon as its GEMM is done (true), or every
    /// bucket in turn after the backward (false).
    pub overlap: bool,
}

/// What a DDP backward took on each rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdpReport {
    /// Each rank's breakdown, by rank.
    pub ranks: Vec<Breakdown>,
    /// The longest rank's wall time, ticks.
    pub step: Tick,
}

impl DdpStep {
    /// The bucket's (rows, cols) on `cubes` cubes. Err: a size that does
    /// not split into whole rows per cube.
    pub fn bucket_shape(&self, cubes: u32) -> Result<(usize, usize), DistError> {
        let row = (BUCKET_COLS * 2 * cubes as usize) as u64;
        if self.bucket_bytes == 0 || !self.bucket_bytes.is_multiple_of(row) {
            return Err(DistError::Config(format!(
                "DDP bucket of {} B: a bucket is whole rows of {BUCKET_COLS} f16 on each of the {cubes} cubes; allowed: a positive multiple of {row} B (512 KiB is 524288)",
                self.bucket_bytes
            )));
        }
        Ok(((self.bucket_bytes / 2) as usize / BUCKET_COLS, BUCKET_COLS))
    }
}

/// Runs one DDP backward on every rank of `pg` (each with its own device).
pub fn ddp_step(pg: &mut ProcessGroup, step: &DdpStep) -> Result<DdpReport, DistError> {
    let cubes = pg.machine.topology.cubes_per_sip();
    let (m, n) = step.bucket_shape(cubes)?;
    if step.k == 0 || step.buckets == 0 {
        return Err(DistError::Config(format!(
            "DDP step of {} bucket(s) with k = {}; allowed: at least one bucket and k >= 1",
            step.buckets, step.k
        )));
    }
    let out = Mutex::new(Vec::new());
    let world = pg.world_size;
    pg.spawn(world, |ctx| {
        // Buckets first, in the same order on every rank: a collective's
        // buffers sit at the same offsets on every rank.
        let buckets = (0..step.buckets)
            .map(|_| ctx.empty((m, n), DPPolicy::cube_rows(cubes)))
            .collect::<Result<Vec<Tensor>, _>>()?;
        let a = ctx.parameter((m, step.k), DPPolicy::cube_rows(cubes))?;
        let b = ctx.parameter((step.k, n), replicated(cubes))?;
        let mut time = Timeline::start(ctx);
        let gemms = buckets
            .iter()
            .map(|g| matmul_placed(ctx, &a, &b, g, &step.placement))
            .collect::<Result<Vec<Work>, _>>()?;
        let mut reduces = Vec::new();
        for (w, g) in gemms.into_iter().zip(&buckets) {
            time.kernel(ctx, w)?;
            if step.overlap {
                reduces.push(ctx.all_reduce_async(g, ReduceOp::Sum)?);
            }
        }
        for g in buckets.iter().filter(|_| !step.overlap) {
            let w = ctx.all_reduce_async(g, ReduceOp::Sum)?;
            time.collective_work(ctx, w)?;
        }
        for w in reduces {
            time.collective_work(ctx, w)?;
        }
        let breakdown = time.breakdown(ctx);
        for t in buckets.into_iter().chain([a, b]) {
            ctx.free(t)?;
        }
        out.lock()
            .map_err(|_| DistError::Run("a rank panicked holding the results".into()))?
            .push((ctx.rank(), breakdown));
        Ok(())
    })?;
    let mut ranks = out.into_inner().unwrap_or_else(|e| e.into_inner());
    ranks.sort_by_key(|r| r.0);
    let ranks: Vec<Breakdown> = ranks.into_iter().map(|r| r.1).collect();
    let step = ranks.iter().map(|b| b.total).max().unwrap_or(0);
    Ok(DdpReport { ranks, step })
}
