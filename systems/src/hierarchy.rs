//! The simulated hardware: PEs are entities, SIPs and cubes are numbers.
//!
//! On a PE entity: [`Pe`] (its SIP, cube and index, which the deadlock
//! report names), [`PeRate`] (what `kernel_step` charges its ops), and once
//! used, exec's `PeExec` and ipcq's `NeighborTables`: everything a PE's own
//! system reads. In the [`Hardware`] resource: the dense index from a PE's
//! number to its entity and from a PE, SRAM or HBM to its network node,
//! which messages (whose tags carry numbers) need to reach their PE.
//!
//! SIPs and cubes are no entities: nothing a system reads is per SIP or per
//! cube except memory ports, which stay the dense `MemPorts` table (see
//! `memory`), so a SIP or cube entity would carry nothing; the topology
//! layer holds the counts.

use crate::ids::PeIdx;
use crate::network::NodeId;
use crate::program::{MemLoc, Space};
use bevy_ecs::prelude::*;

/// A processing element (its network node is `Hardware::pe_nodes`).
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pe {
    pub sip: u32,
    pub cube: u32,
    pub index: u32,
}

/// A PE's throughput, from its SIP's kind: what `kernel_step` charges its
/// ops and a launch's start-up.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeRate {
    /// 16-bit lanes of the vector unit: f16 or bf16 elements per tick (f32
    /// elements take two lanes each).
    pub vector_lanes: u64,
    /// Multiply-accumulates the MAC array completes per tick.
    pub macs_per_tick: u64,
    /// Ticks from a launch's arrival to the kernel's first op.
    pub launch_overhead: crate::time::Tick,
}

impl Default for PeRate {
    fn default() -> Self {
        Self {
            vector_lanes: 1,
            macs_per_tick: 1,
            launch_overhead: 0,
        }
    }
}

/// Entity handles and network nodes of the hierarchy, dense by global index
/// (PE `g = (sip·cubes_per_sip + cube)·pes_per_cube + pe`, cube
/// `sip·cubes_per_sip + cube`), so systems reach a PE without a query scan.
#[derive(Resource, Debug, Default)]
pub struct Hardware {
    /// PE entities (they carry `PeExec` and `NeighborTable` once launched or wired).
    pub pes: Vec<Entity>,
    pub cubes_per_sip: u32,
    pub pes_per_cube: u32,
    pub host_node: NodeId,
    pub pe_nodes: Vec<NodeId>,
    pub sram_nodes: Vec<NodeId>,
    pub hbm_nodes: Vec<NodeId>,
}

impl Hardware {
    /// Global index of a PE.
    pub fn pe_index(&self, sip: u32, cube: u32, pe: u32) -> PeIdx {
        PeIdx((sip * self.cubes_per_sip + cube) * self.pes_per_cube + pe)
    }

    /// (sip, cube, pe) of a global PE index.
    pub fn coords(&self, pe: PeIdx) -> (u32, u32, u32) {
        let g = pe.0;
        let cube = g / self.pes_per_cube;
        (
            cube / self.cubes_per_sip,
            cube % self.cubes_per_sip,
            g % self.pes_per_cube,
        )
    }

    /// The entity of a PE.
    pub fn pe_entity(&self, pe: PeIdx) -> Entity {
        self.pes[pe.index()]
    }

    /// The network node of a PE.
    pub fn pe_node(&self, pe: PeIdx) -> NodeId {
        self.pe_nodes[pe.index()]
    }

    /// The cube (global index, the number of its SRAM and HBM) a PE sits in.
    pub fn cube_of(&self, pe: PeIdx) -> u32 {
        pe.0 / self.pes_per_cube
    }

    /// The network node that serves a memory location.
    pub fn mem_node(&self, loc: MemLoc) -> NodeId {
        let i = loc.instance as usize;
        match loc.space {
            Space::Tcm => self.pe_nodes[i],
            Space::Sram => self.sram_nodes[i],
            Space::Hbm => self.hbm_nodes[i],
        }
    }
}

impl crate::trace::PeCoords for Hardware {
    fn coords(&self, pe: PeIdx) -> (u32, u32, u32) {
        Hardware::coords(self, pe)
    }
}

/// Network nodes of the hardware, from the topology layer.
pub struct HardwareNodes<'a> {
    pub host: NodeId,
    pub pe: &'a dyn Fn(u32, u32, u32) -> NodeId,
    pub sram: &'a dyn Fn(u32, u32) -> NodeId,
    pub hbm: &'a dyn Fn(u32, u32) -> NodeId,
}

/// Spawns the `sips × cubes × pes` PE entities, each with its SIP's
/// `rate(sip)`, and inserts the [`Hardware`] index.
pub fn spawn_hardware(
    world: &mut World,
    sips: u32,
    cubes_per_sip: u32,
    pes_per_cube: u32,
    nodes: HardwareNodes,
    rate: &dyn Fn(u32) -> PeRate,
) {
    let pe_node = nodes.pe;
    let pe_entities: Vec<Entity> = world
        .spawn_batch((0..sips).flat_map(|s| {
            let r = rate(s);
            (0..cubes_per_sip).flat_map(move |c| {
                (0..pes_per_cube).map(move |p| {
                    (
                        Pe {
                            sip: s,
                            cube: c,
                            index: p,
                        },
                        r,
                    )
                })
            })
        }))
        .collect();
    let cubes = (0..sips).flat_map(|s| (0..cubes_per_sip).map(move |c| (s, c)));
    world.insert_resource(Hardware {
        pes: pe_entities,
        cubes_per_sip,
        pes_per_cube,
        host_node: nodes.host,
        pe_nodes: (0..sips)
            .flat_map(|s| {
                (0..cubes_per_sip).flat_map(move |c| (0..pes_per_cube).map(move |p| (s, c, p)))
            })
            .map(|(s, c, p)| pe_node(s, c, p))
            .collect(),
        sram_nodes: cubes.clone().map(|(s, c)| (nodes.sram)(s, c)).collect(),
        hbm_nodes: cubes.map(|(s, c)| (nodes.hbm)(s, c)).collect(),
    });
}
