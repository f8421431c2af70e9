//! Helpers shared by the system-level tests.
#![allow(dead_code)]

use kernbench::spec::{SipTopology, System, SystemSpec};

/// The embedded default spec, edited by `f`, validated.
pub fn system(f: impl FnOnce(&mut SystemSpec)) -> System {
    let mut spec = System::embedded_default().spec;
    f(&mut spec);
    System::from_spec(spec, "test").expect("test spec is valid")
}

/// `n` SIPs of one cube with one PE; every edge kind but inter-SIP ideal, so
/// only inter-SIP links cost time.
pub fn lean(n: u32, topology: SipTopology, grid: Option<(u32, u32)>) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.system.sips.topology = topology;
        (s.system.sips.w, s.system.sips.h) = (grid.map(|g| g.0), grid.map(|g| g.1));
        s.sip.cube_mesh.w = 1;
        s.sip.cube_mesh.h = 1;
        s.cube.pe_layout.pe_per_corner = 1;
        s.cube.pe_layout.corners = 1;
        s.cube.noc_mesh.w = 1;
        s.cube.noc_mesh.h = 1;
        for l in [&mut s.links.noc, &mut s.links.ucie, &mut s.links.pcie] {
            l.ideal = true;
        }
    })
}
