//! Topology compile: counts, naming, routes as valid paths, hop counts.

use crate::common;
use common::{lean, system};
use kernbench::spec::SipTopology;
use kernbench::topology::address::{AddressResolver, Location, Space};
use kernbench::topology::{Dir, INTER_SIP, Node, NodeKind, Topology};
use kernbench_systems::NodeId;
use proptest::prelude::*;

fn count(t: &Topology, k: NodeKind) -> u64 {
    t.node_counts().into_iter().find(|c| c.0 == k).unwrap().1
}

#[test]
fn default_system_counts() {
    let sys = kernbench::spec::System::embedded_default();
    let t = Topology::new(&sys);
    assert_eq!(count(&t, NodeKind::Pe), 4 * 16 * 8);
    assert_eq!(count(&t, NodeKind::Router), 4 * 16 * 9);
    assert_eq!(count(&t, NodeKind::Hbm), 64);
    // A 4x4 cube mesh has 24 cube-to-cube edges, 2 ports each.
    assert_eq!(count(&t, NodeKind::UciePort), 4 * 48);
    // ring_1d: every cube of every SIP has an east and a west lane port.
    assert_eq!(count(&t, NodeKind::XSipPort), 4 * 16 * 2);
}

#[test]
fn every_present_node_round_trips_through_id_and_name() {
    let sys = system(|s| {
        s.system.sips.count = 6;
        s.system.sips.topology = SipTopology::Mesh2dNoWrap;
        (s.system.sips.w, s.system.sips.h) = (Some(3), Some(2));
        s.sip.cube_mesh.w = 3;
        s.sip.cube_mesh.h = 2;
    });
    let t = Topology::new(&sys);
    let mut present = 0u64;
    for id in (0..t.node_count()).map(NodeId) {
        let n = t.node(id);
        if t.present(n) {
            present += 1;
            assert_eq!(t.id(n), id, "{n}");
            assert_eq!(t.parse_node(&n.to_string()), Ok(id));
        }
    }
    let counted: u64 = t.node_counts().iter().map(|c| c.1).sum();
    assert_eq!(present, counted);
    assert!(
        t.parse_node("sip6.io")
            .unwrap_err()
            .contains("does not exist")
    );
    assert!(
        t.parse_node("sip0.cube0.pe8")
            .unwrap_err()
            .contains("does not exist")
    );
    assert!(
        t.parse_node("gpu0")
            .unwrap_err()
            .contains("not a node name")
    );
}

/// Every consecutive pair of a route is a link of the compiled table.
fn assert_valid_routes(sys: &kernbench::spec::System, pairs: &[(NodeId, NodeId)]) {
    use kernbench_systems::RouteSource;
    let t = Topology::new(sys);
    let links = t.links(sys).unwrap();
    for &(a, b) in pairs {
        let mut path = Vec::new();
        t.route(a, b, &mut path).unwrap();
        assert_eq!((path[0], *path.last().unwrap()), (a, b));
        for w in path.windows(2) {
            assert!(
                links.find(w[0], w[1]).is_some(),
                "{} -> {} not a link on route {} -> {}",
                t.node(w[0]),
                t.node(w[1]),
                t.node(a),
                t.node(b)
            );
        }
        let mut seen = path.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen.len(),
            path.len(),
            "route {} -> {} revisits a node",
            t.node(a),
            t.node(b)
        );
    }
}

#[test]
fn routes_are_loop_free_paths_of_existing_links() {
    for topo in [
        SipTopology::Ring1d,
        SipTopology::Torus2d,
        SipTopology::Mesh2dNoWrap,
    ] {
        let sys = system(|s| {
            s.system.sips.count = 6;
            s.system.sips.topology = topo;
            if topo.is_2d() {
                (s.system.sips.w, s.system.sips.h) = (Some(3), Some(2));
            }
            s.sip.cube_mesh.w = 3;
            s.sip.cube_mesh.h = 2;
            s.cube.noc_mesh.w = 4;
            s.system.sips.inter_sip_cubes = Some(vec![1, 5]);
        });
        let t = Topology::new(&sys);
        let nodes: Vec<NodeId> = (0..t.node_count())
            .map(NodeId)
            .filter(|&i| t.present(t.node(i)))
            .collect();
        let pairs: Vec<(NodeId, NodeId)> = (0..4000u32)
            .map(|i| {
                (
                    nodes[(i as usize * 7919) % nodes.len()],
                    nodes[(i as usize * 104_729 + 13) % nodes.len()],
                )
            })
            .collect();
        assert_valid_routes(&sys, &pairs);
    }
}

/// Inter-SIP links on the route between PEs of SIPs `a` and `b`.
fn sip_hops(t: &Topology, sys: &kernbench::spec::System, a: u32, b: u32) -> usize {
    use kernbench_systems::RouteSource;
    let links = t.links(sys).unwrap();
    let mut path = Vec::new();
    t.route(
        t.id(Node::Pe {
            sip: a,
            cube: 0,
            pe: 0,
        }),
        t.id(Node::Pe {
            sip: b,
            cube: 0,
            pe: 0,
        }),
        &mut path,
    )
    .unwrap();
    path.windows(2)
        .filter(|w| links.class_index(links.find(w[0], w[1]).unwrap()) == INTER_SIP)
        .count()
}

#[test]
fn torus_wraps_and_mesh_does_not() {
    let torus = lean(16, SipTopology::Torus2d, Some((4, 4)));
    let mesh = lean(16, SipTopology::Mesh2dNoWrap, Some((4, 4)));
    let (tt, tm) = (Topology::new(&torus), Topology::new(&mesh));
    // (0,0) -> (3,3): one wrap hop per dimension vs three hops per dimension.
    assert_eq!(sip_hops(&tt, &torus, 0, 15), 2);
    assert_eq!(sip_hops(&tm, &mesh, 0, 15), 6);
    // (0,0) -> (2,1): 2 + 1 either way (tie on the 4-wide ring goes east).
    assert_eq!(sip_hops(&tt, &torus, 0, 6), 3);
    assert_eq!(sip_hops(&tm, &mesh, 0, 6), 3);
    assert_eq!(tt.sip_steps(0, 2), vec![Dir::E, Dir::E]);
    assert_eq!(tt.sip_steps(0, 3), vec![Dir::W]);
    assert_eq!(tm.sip_steps(0, 3), vec![Dir::E, Dir::E, Dir::E]);
    // Whole route: pe -> router -> port, then 3 hops per SIP crossing, then port -> router -> pe.
    assert_eq!(
        tt.hops(
            tt.id(Node::Pe {
                sip: 0,
                cube: 0,
                pe: 0
            }),
            tt.id(Node::Pe {
                sip: 15,
                cube: 0,
                pe: 0
            })
        ),
        Ok(2 + 3 * 2)
    );
    // Diameters: torus 2+2 SIP hops, mesh 3+3.
    assert_eq!(tt.diameter().0, 2 + 3 * 4);
    assert_eq!(tm.diameter().0, 2 + 3 * 6);
}

#[test]
fn rectangular_torus_and_ring_hop_counts() {
    let torus = lean(6, SipTopology::Torus2d, Some((3, 2)));
    let t = Topology::new(&torus);
    for b in 0..6 {
        let (x, y) = t.sip_coord(b);
        let expect = x.min(3 - x) + y.min(2 - y);
        assert_eq!(sip_hops(&t, &torus, 0, b), expect as usize, "0 -> {b}");
    }
    let ring = lean(16, SipTopology::Ring1d, None);
    let r = Topology::new(&ring);
    for b in 0..16u32 {
        assert_eq!(
            sip_hops(&r, &ring, 0, b),
            b.min(16 - b) as usize,
            "0 -> {b}"
        );
    }
}

#[test]
fn host_reaches_every_sip_over_pcie() {
    let sys = system(|s| s.system.sips.count = 3);
    let t = Topology::new(&sys);
    let pe = t.id(Node::Pe {
        sip: 2,
        cube: 5,
        pe: 3,
    });
    let hbm = t.id(Node::Hbm { sip: 1, cube: 0 });
    let io = t.id(Node::SipIo { sip: 1 });
    assert_valid_routes(
        &sys,
        &[
            (NodeId(0), pe),
            (pe, NodeId(0)),
            (NodeId(0), hbm),
            (hbm, NodeId(0)),
            (NodeId(0), io),
            (io, NodeId(0)),
            (io, pe),
            (pe, io),
        ],
    );
    assert_eq!(t.hops(NodeId(0), io), Ok(1));
}

#[test]
fn noc_layout_puts_endpoints_where_documented() {
    let sys = kernbench::spec::System::embedded_default();
    let t = Topology::new(&sys);
    let dot = t.cube_dot(0, 5);
    // PE clusters on corners, HBM in the centre, UCIe east port on the east edge midpoint.
    for edge in [
        "\"sip0.cube5.pe0\" -- \"sip0.cube5.r0_0\"",
        "\"sip0.cube5.pe3\" -- \"sip0.cube5.r2_0\"",
        "\"sip0.cube5.pe7\" -- \"sip0.cube5.r2_2\"",
        "\"sip0.cube5.hbm\" -- \"sip0.cube5.r1_1\"",
        "\"sip0.cube5.ucie_e\" -- \"sip0.cube5.r2_1\"",
        "\"sip0.cube5.mcpu\" -- \"sip0.cube5.r1_0\"",
    ] {
        assert!(dot.contains(edge), "missing {edge} in\n{dot}");
    }
    let sips = t.sip_dot();
    assert!(sips.contains("sip3 -- sip0"), "ring wraps:\n{sips}");
}

proptest! {
    #[test]
    fn addresses_round_trip(sip in 0u32..6, cube in 0u32..16, pe in 0u32..8, space in 0usize..3, off in 0u64..1 << 40) {
        let sys = system(|s| s.system.sips.count = 6);
        let r = AddressResolver::new(&sys).unwrap();
        let space = Space::ALL[space];
        let size = match space { Space::Tcm => 4 << 20, Space::Sram => 32 << 20, Space::Hbm => 4u64 << 30 };
        let pe = if space == Space::Tcm { pe } else { 0 };
        let l = Location { space, sip, cube, pe, offset: off % size };
        let a = r.encode(l).unwrap();
        prop_assert_eq!(r.decode(a).unwrap(), l);
        let (past_end, bad_sip) = (Location { offset: size, ..l }, Location { sip: 6, ..l });
        prop_assert!(r.encode(past_end).is_err());
        prop_assert!(r.encode(bad_sip).is_err());
    }
}
