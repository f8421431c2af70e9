//! `parallel_state`, named after Megatron's: tensor-parallel groups over the
//! ranks of a process group, so TP may be smaller than the world (DP × TP).

use crate::gemm::Placement;
use kernbench_dist::{DistError, GroupId, ProcessGroup, WORLD};

/// The tensor-parallel layout of a world: which TP group each rank is in
/// and its place there. [`initialize_model_parallel`] makes Megatron's
/// convention (`tp` consecutive ranks a group); [`ModelParallel::of_groups`]
/// takes any layout (a training step's axis order).
#[derive(Debug, Clone)]
pub struct ModelParallel {
    tp: u32,
    /// By rank: its place in its TP group, and that group.
    by_rank: Vec<(u32, GroupId)>,
    /// Which PEs of each cube the layers made after setting it compute on
    /// (`Placement::Owners`, today's, unless set).
    pub placement: Placement,
}

/// Installs one communicator per TP group (`initialize_model_parallel`):
/// call it on the process group before `spawn`. With `tp` = the world size
/// the one TP group is the world.
pub fn initialize_model_parallel(
    pg: &mut ProcessGroup,
    tp: u32,
) -> Result<ModelParallel, DistError> {
    let world = pg.world_size;
    if tp == 0 || !world.is_multiple_of(tp) {
        let divisors: Vec<String> = (1..=world)
            .filter(|d| world.is_multiple_of(*d))
            .map(|d| d.to_string())
            .collect();
        return Err(DistError::Config(format!(
            "tensor_model_parallel_size {tp} does not divide the world of {world} ranks; allowed: {} (or a system with a multiple of {tp} SIPs, system.sips.count)",
            divisors.join(", ")
        )));
    }
    let groups = if tp == world {
        vec![WORLD]
    } else {
        (0..world / tp)
            .map(|d| pg.new_group(&(d * tp..(d + 1) * tp).collect::<Vec<_>>()))
            .collect::<Result<_, _>>()?
    };
    let by_rank = (0..world)
        .map(|r| (r % tp, groups[(r / tp) as usize]))
        .collect();
    Ok(ModelParallel::of_groups(tp, by_rank))
}

impl ModelParallel {
    /// TP groups of `tp` ranks given rank by rank: `by_rank[r]` is rank
    /// r's place in its group and the group (made on the process group
    /// before `spawn`).
    pub fn of_groups(tp: u32, by_rank: Vec<(u32, GroupId)>) -> ModelParallel {
        ModelParallel {
            tp,
            by_rank,
            placement: Placement::Owners,
        }
    }

    /// `get_tensor_model_parallel_world_size`.
    pub fn tp_size(&self) -> u32 {
        self.tp
    }

    /// `get_tensor_model_parallel_rank`: the rank's place in its TP group.
    pub fn tp_rank(&self, rank: u32) -> u32 {
        self.by_rank[rank as usize].0
    }

    /// The TP group of `rank`, for its collectives.
    pub fn tp_group(&self, rank: u32) -> GroupId {
        self.by_rank[rank as usize].1
    }
}
