//! The host runtime: a process group of ranks (rank = SIP) sharing one
//! simulated machine, read like torch.distributed.
//!
//! ```
//! use kernbench_ccl::{CclConfig, ReduceOp};
//! use kernbench_dist::{DPPolicy, init_process_group};
//! use kernbench_spec::spec::System;
//! use kernbench_systems::memory::DataMode;
//!
//! let sys = System::embedded_default();
//! let ccl = CclConfig::embedded_default();
//! let mut pg = init_process_group(&sys, &ccl, "ring", DataMode::Functional).unwrap();
//! let (n, cubes) = (pg.world_size, sys.cubes_per_sip());
//! pg.spawn(n, |ctx| {
//!     // A (cubes, 256) tensor: one row of 256 on each cube leader.
//!     let t = ctx.empty((cubes as usize, 256), DPPolicy::cube_rows(cubes))?;
//!     let row = |c: u32| (ctx.rank() + c) as f32;
//!     let data: Vec<f32> = (0..cubes * 256).map(|i| row(i / 256)).collect();
//!     ctx.write(&t, &data)?;
//!     // torch's meaning: element-wise over the ranks, cube c's row meeting
//!     // cube c's row of every other rank.
//!     ctx.all_reduce(&t, ReduceOp::Sum)?;
//!     let got = ctx.read(&t)?;
//!     let ranks = (0..n).sum::<u32>();
//!     assert!((0..cubes * 256).all(|i| got[i as usize] == (ranks + n * (i / 256)) as f32));
//!     // ADR-0032's meaning, by name: every cube a replica, summed over
//!     // ranks x cubes.
//!     let r = ctx.empty((cubes as usize, 256), DPPolicy::cube_replicas(cubes))?;
//!     ctx.write(&r, &vec![ctx.rank() as f32; cubes as usize * 256])?;
//!     ctx.all_reduce(&r, ReduceOp::Sum)?;
//!     assert!(ctx.read(&r)?.iter().all(|&v| v == ranks as f32 * cubes as f32));
//!     Ok(())
//! })
//! .unwrap();
//! ```
//!
//! Files: `group` (init, world size, subgroups), `spawn` (the cooperative
//! scheduler), `rank` (a worker's calls), `tensor` (DPPolicy and shards),
//! `layout` (mapper and validator registries), `barrier` (collective epochs),
//! `p2p` (send/recv, scatter/gather, all_to_all_single, the barrier's rounds).

mod barrier;
mod group;
pub mod layout;
mod order;
mod p2p;
mod rank;
mod spawn;
pub mod tensor;
mod work;

pub use barrier::{Call, EpochBarrier, Joined};
pub use group::{
    ConfigPicker, GroupId, ProcessGroup, RankGroup, RankUnit, TurnOrder, WORLD, init_process_group,
    init_process_group_picking, init_process_group_within, process_group_estimate, world_size,
};
pub use rank::Rank;
pub(crate) use spawn::WORKER_STACK;
pub use tensor::{Block, DPPolicy, Shard, Split, Tensor};
pub use work::{Stream, StreamKind, Work, WorkClass, WorkRecord, WorkReport};

/// Why a distributed program failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DistError {
    /// Bad input: a size, a rank, a name; the message names the fix.
    #[error("{0}")]
    Config(String),
    /// Out of memory, or a read/write outside a tensor.
    #[error("{0}")]
    Memory(String),
    /// A tensor's shard layout does not fit the collective.
    #[error("{0}")]
    Layout(String),
    /// Ranks made different collective calls, or one joined twice.
    #[error("{0}")]
    Collective(String),
    /// The simulation failed (deadlock, model error).
    #[error("{0}")]
    Run(String),
    /// Another rank failed; this worker's call was cut short.
    #[error("aborted: {0}")]
    Aborted(String),
    /// A worker panicked.
    #[error("panicked: {0}")]
    Panic(String),
    /// What `spawn` returns when a worker fails.
    #[error("rank {rank}: {error}")]
    Worker { rank: u32, error: Box<DistError> },
}

impl From<kernbench_ccl::CclError> for DistError {
    fn from(e: kernbench_ccl::CclError) -> Self {
        DistError::Run(e.to_string())
    }
}

impl From<kernbench_runtime::machine::LaunchError> for DistError {
    fn from(e: kernbench_runtime::machine::LaunchError) -> Self {
        DistError::Run(e.to_string())
    }
}
