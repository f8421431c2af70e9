//! A built machine: the compiled topology plus an engine world holding the
//! SIP/cube/PE entities, the link table and the route cache.

use crate::spec::System;
use crate::topology::{Node, Topology, TopologyError};
use kernbench_systems::Engine;
use kernbench_systems::hierarchy::spawn_hardware;

pub struct Machine {
    pub topology: Topology,
    pub engine: Engine,
}

impl Machine {
    /// Compiles the topology and spawns the hardware entities.
    pub fn build(sys: &System) -> Result<Self, TopologyError> {
        let topology = Topology::new(sys);
        let links = topology.links(sys)?;
        let mut engine = Engine::new(links, Box::new(topology.clone()));
        let t = &topology;
        spawn_hardware(
            &mut engine.world,
            t.sips,
            t.cubes_per_sip(),
            t.pes_per_cube,
            |sip, cube, pe| t.id(Node::Pe { sip, cube, pe }),
        );
        Ok(Self { topology, engine })
    }

    /// Node id of PE `pe` of `cube` on `sip`.
    pub fn pe(&self, sip: u32, cube: u32, pe: u32) -> u32 {
        self.topology.id(Node::Pe { sip, cube, pe })
    }
}
