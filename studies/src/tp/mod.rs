//! Megatron-style tensor parallelism, forward only: TP groups
//! over the ranks (`state`), the parallel layers (`layers`) and their
//! kernels (`kernels`), the region primitives below, the time breakdown of
//! a rank (`timeline`), a 2-layer MLP checked against an f32
//! reference (`mlp`) and a transformer block for scaling studies (`block`,
//! `study`: `kernbench sweep --plan tp`).
//!
//! Layouts inside a rank (C = cubes per SIP, every shard whole per cube so
//! the cube's PEs share it): activations entering a column-parallel layer
//! are [`replicated`] (every cube holds all of them); a column-parallel
//! output is [`cube_cols`]; a row-parallel output is replicated, each
//! cube's copy first its partial sum (split-K), then the all-reduce's total.
//!
//! ```
//! use kernbench_ccl::CclConfig;
//! use kernbench_dist::init_process_group;
//! use kernbench_spec::spec::System;
//! use kernbench_studies::tp::{self, ColumnParallelLinear, RowParallelLinear, Timeline};
//! use kernbench_systems::memory::DataMode;
//!
//! let sys = System::embedded_default(); // 4 SIPs of 16 cubes
//! let mut pg = init_process_group(&sys, &CclConfig::embedded_default(), "ring", DataMode::TimingOnly).unwrap();
//! let mp = tp::initialize_model_parallel(&mut pg, 2).unwrap(); // 2 replicas of TP 2
//! let n = pg.world_size;
//! pg.spawn(n, |ctx| {
//!     let fc1 = ColumnParallelLinear::new(ctx, &mp, (512, 2048), false, None)?;
//!     let fc2 = RowParallelLinear::new(ctx, &mp, (2048, 512), None, None)?;
//!     let x = ctx.empty((8, 512), tp::replicated(16))?;
//!     let mut time = Timeline::start(ctx);
//!     let h = fc1.forward(ctx, &x, &mut time)?;
//!     let y = fc2.forward(ctx, &mp, &h, &mut time)?;
//!     assert_eq!(y.shape, (8, 512));
//!     let b = time.breakdown(ctx);
//!     assert_eq!(b.compute + b.communication - b.hidden + b.launch, b.total);
//!     Ok(())
//! })
//! .unwrap();
//! ```

pub mod block;
pub(crate) mod kernels;
pub mod layers;
pub mod mlp;
mod state;
pub mod study;
mod timeline;

pub use kernels::{BiasArgs, EmbedArgs, bias_add_kernel, embedding_kernel};
pub use layers::{
    BiasPolicy, ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, bias_add,
    seeded_matrix,
};
pub use state::{ModelParallel, initialize_model_parallel};
pub use timeline::{Breakdown, Timeline};

use kernbench_ccl::{Collective, ReduceOp};
use kernbench_dist::{DPPolicy, DistError, Rank, Split, Tensor};
use layers::tp_collective;

/// Every cube holds the whole tensor: the layout of activations between
/// layers, and of a collective buffer over the cube leaders.
pub fn replicated(cubes: u32) -> DPPolicy {
    DPPolicy {
        cube: Split::Replicate,
        pe: Split::Replicate,
        num_cubes: cubes,
        num_pes: 1,
        replicas: false,
    }
}

/// Columns split over the cubes, one shard per cube.
pub fn cube_cols(cubes: u32) -> DPPolicy {
    DPPolicy {
        cube: Split::ColumnWise,
        pe: Split::Replicate,
        num_cubes: cubes,
        num_pes: 1,
        replicas: false,
    }
}

/// Cubes per SIP of the rank's machine.
fn cubes(ctx: &Rank) -> u32 {
    ctx.sip_shape().0
}

/// `copy_to_tensor_model_parallel_region`: identity in the forward pass
/// (its backward, an all-reduce, is out of scope: no training).
pub fn copy_to(x: &Tensor) -> &Tensor {
    x
}

/// `reduce_from_tensor_model_parallel_region`: all-reduce (sum) over the
/// rank's TP group, in place. `x` is replicated over the rank's cubes, each
/// copy a partial sum; afterwards every copy on every rank holds the total.
pub fn reduce_from(
    ctx: &mut Rank,
    mp: &ModelParallel,
    x: &Tensor,
    time: &mut Timeline,
) -> Result<(), DistError> {
    tp_collective(ctx, mp, Collective::AllReduce, x, ReduceOp::Sum, time)
}

/// `scatter_to_tensor_model_parallel_region`, on a real reduce-scatter over
/// the TP group, in place: the buffer is one block per participant (the
/// cube leaders, rank by rank: rank r's cube c takes block r·C + c), and
/// each participant keeps its block reduced under `op`. For `x` equal on
/// every copy, `ReduceOp::Max` leaves each its block of `x` exactly
/// (Megatron's split, which moves no data there, costs a reduce-scatter
/// here); for partial sums, `ReduceOp::Sum` is sequence parallelism's
/// reduce-scatter.
pub fn scatter_to(
    ctx: &mut Rank,
    mp: &ModelParallel,
    x: &Tensor,
    op: ReduceOp,
    time: &mut Timeline,
) -> Result<(), DistError> {
    tp_collective(ctx, mp, Collective::ReduceScatter, x, op, time)
}

/// `gather_from_tensor_model_parallel_region`, on a real all-gather over the
/// TP group, in place: each participant's block (as [`scatter_to`] leaves
/// it) reaches every copy, so `gather_from(scatter_to(x)) = x`.
pub fn gather_from(
    ctx: &mut Rank,
    mp: &ModelParallel,
    x: &Tensor,
    time: &mut Timeline,
) -> Result<(), DistError> {
    tp_collective(ctx, mp, Collective::AllGather, x, ReduceOp::Sum, time)
}
