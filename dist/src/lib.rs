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
//!     ctx.write(&t, &vec![ctx.rank() as f32; cubes as usize * 256])?;
//!     ctx.all_reduce(&t, ReduceOp::Sum)?;
//!     // Every cube of every rank held its rank: the sum over ranks and cubes.
//!     let want = (0..n).sum::<u32>() as f32 * cubes as f32;
//!     assert!(ctx.read(&t)?.iter().all(|&v| v == want));
//!     Ok(())
//! })
//! .unwrap();
//! ```
//!
//! Files: `group` (init, world size, subgroups), `spawn` (the cooperative
//! scheduler), `rank` (a worker's calls), `tensor` (DPPolicy and shards),
//! `layout` (mapper and validator registries), `barrier` (collective epochs).

mod barrier;
mod group;
pub mod layout;
mod order;
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
pub use work::{Stream, StreamKind, Work, WorkReport};

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
