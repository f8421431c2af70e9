//! The simulated hardware as entities: SIPs own cubes, cubes own PEs
//! (bevy `ChildOf` relationships), each PE knows its network node.

use crate::network::NodeId;
use bevy_ecs::prelude::*;

/// A SIP: one device, one rank.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sip {
    pub index: u32,
}

/// A cube (chiplet) of a SIP; `index` is row-major in the cube mesh.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cube {
    pub sip: u32,
    pub index: u32,
}

/// A processing element and the network node it sends from.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pe {
    pub sip: u32,
    pub cube: u32,
    pub index: u32,
    pub node: NodeId,
}

/// Entity handles of the hierarchy, dense by index, so systems reach a PE
/// without a query scan.
#[derive(Resource, Debug, Default)]
pub struct Hardware {
    pub sips: Vec<Entity>,
    pub cubes: Vec<Entity>,
    pub pes: Vec<Entity>,
    pub cubes_per_sip: u32,
    pub pes_per_cube: u32,
}

impl Hardware {
    pub fn pe(&self, sip: u32, cube: u32, pe: u32) -> Entity {
        let i = (sip as usize * self.cubes_per_sip as usize + cube as usize)
            * self.pes_per_cube as usize
            + pe as usize;
        self.pes[i]
    }
}

/// Spawns `sips × cubes × pes` entities with their relationships and inserts
/// the [`Hardware`] index. `pe_node(sip, cube, pe)` gives each PE's node.
pub fn spawn_hardware(
    world: &mut World,
    sips: u32,
    cubes_per_sip: u32,
    pes_per_cube: u32,
    pe_node: impl Fn(u32, u32, u32) -> NodeId,
) {
    let sip_entities: Vec<Entity> = world
        .spawn_batch((0..sips).map(|index| Sip { index }))
        .collect();
    let cube_entities: Vec<Entity> = world
        .spawn_batch((0..sips).flat_map(|s| {
            let parent = sip_entities[s as usize];
            (0..cubes_per_sip).map(move |c| (Cube { sip: s, index: c }, ChildOf(parent)))
        }))
        .collect();
    let pe_entities: Vec<Entity> = world
        .spawn_batch((0..sips).flat_map(|s| {
            let cube_entities = &cube_entities;
            let pe_node = &pe_node;
            (0..cubes_per_sip).flat_map(move |c| {
                let parent = cube_entities[(s * cubes_per_sip + c) as usize];
                (0..pes_per_cube).map(move |p| {
                    let pe = Pe {
                        sip: s,
                        cube: c,
                        index: p,
                        node: pe_node(s, c, p),
                    };
                    (pe, ChildOf(parent))
                })
            })
        }))
        .collect();
    world.insert_resource(Hardware {
        sips: sip_entities,
        cubes: cube_entities,
        pes: pe_entities,
        cubes_per_sip,
        pes_per_cube,
    });
}
