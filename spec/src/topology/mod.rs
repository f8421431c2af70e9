//! Topology compile: system spec → named nodes, directed links of four edge
//! kinds, coordinate routing and address resolution.
//!
//! Nodes are never stored one by one: a node's dense id is arithmetic on its
//! (sip, cube, slot) coordinates, so a 4096-SIP system costs only its links.

pub mod address;
pub mod dot;
pub mod naming;
pub mod route;

use crate::spec::{LinkSpec, SipTopology, System};
use kernbench_systems::{LinkClass, LinkTable, LinkTableBuilder, NodeId};
pub use naming::{Dir, Node, NodeKind};

/// The host's node id: it is numbered first.
const HOST: NodeId = NodeId(0);

/// Edge kinds, in link-class index order.
pub const EDGE_KINDS: [&str; 4] = ["noc", "ucie", "inter_sip", "pcie"];
pub const NOC: u8 = 0;
pub const UCIE: u8 = 1;
pub const INTER_SIP: u8 = 2;
pub const PCIE: u8 = 3;

/// Link classes per SIP kind: one per edge kind.
pub const CLASSES_PER_KIND: u8 = 4;

/// The edge kind (NOC, UCIE, INTER_SIP or PCIE) of link class `class`: a
/// system with SIP kinds has four classes per kind, kind-major.
pub fn edge_kind(class: u8) -> u8 {
    class % CLASSES_PER_KIND
}

/// A compile error: the spec is valid YAML but the system cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {field}: {problem}")]
pub struct TopologyError {
    pub origin: String,
    pub field: String,
    pub problem: String,
}

/// The shape of the machine; cheap to clone (no per-node storage).
#[derive(Debug, Clone)]
pub struct Topology {
    pub sips: u32,
    pub kind: SipTopology,
    /// SIP grid (w, h); ring_1d is (count, 1).
    pub grid: (u32, u32),
    /// Cube mesh (w, h) of every SIP.
    pub cube_mesh: (u32, u32),
    /// Router mesh (w, h) of every cube NoC.
    pub noc: (u32, u32),
    pub pes_per_cube: u32,
    pub pe_per_corner: u32,
    /// Per cube id: carries inter-SIP lanes.
    lane: Vec<bool>,
    /// Per cube id: the lane cube that inter-SIP traffic of this cube uses.
    lane_of: Vec<u32>,
    /// Per local slot: the router the slot attaches to.
    attach: Vec<u32>,
    nodes_per_cube: u32,
    nodes_per_sip: u32,
}

/// Local slot offsets inside a cube's block of node ids.
#[derive(Debug, Clone, Copy)]
enum CubeSlot {
    Router(u32),
    Pe(u32),
    MCpu,
    Sram,
    Hbm,
    Ucie(Dir),
    XSip(Dir),
}

/// Floorplan position (fraction of the cube's width/height) of the endpoints
/// that are not PEs. HBM and SRAM sit in the centre, the M_CPU at the north
/// edge, ports at the edge midpoints of their side.
fn floorplan(slot: CubeSlot) -> (f64, f64) {
    match slot {
        CubeSlot::MCpu => (0.5, 0.0),
        CubeSlot::Sram | CubeSlot::Hbm => (0.5, 0.5),
        CubeSlot::Ucie(d) | CubeSlot::XSip(d) => match d {
            Dir::N => (0.5, 0.0),
            Dir::E => (1.0, 0.5),
            Dir::S => (0.5, 1.0),
            Dir::W => (0.0, 0.5),
        },
        CubeSlot::Router(_) | CubeSlot::Pe(_) => {
            unreachable!("routers and PEs are placed by index")
        }
    }
}

/// Nearest router coordinate to a floorplan fraction (ties round up).
fn nearest(frac: f64, n: u32) -> u32 {
    (frac * (n - 1) as f64 + 0.5).floor() as u32
}

impl Topology {
    /// Lays out the system described by a validated spec.
    pub fn new(sys: &System) -> Self {
        let s = &sys.spec;
        let (cw, ch) = (s.sip.cube_mesh.w, s.sip.cube_mesh.h);
        let (nw, nh) = (s.cube.noc_mesh.w, s.cube.noc_mesh.h);
        let cubes = cw * ch;
        let mut lane = vec![false; cubes as usize];
        for c in sys.inter_sip_cubes() {
            lane[c as usize] = true;
        }
        let dist = |a: u32, b: u32| (a % cw).abs_diff(b % cw) + (a / cw).abs_diff(b / cw);
        let lane_of = (0..cubes)
            .map(|c| {
                (0..cubes)
                    .filter(|&l| lane[l as usize])
                    .min_by_key(|&l| (dist(c, l), l))
                    .expect("validated spec has at least one lane cube")
            })
            .collect();
        let mut t = Topology {
            sips: s.system.sips.count,
            kind: s.system.sips.topology,
            grid: sys.sip_grid,
            cube_mesh: (cw, ch),
            noc: (nw, nh),
            pes_per_cube: s.cube.pe_layout.pes(),
            pe_per_corner: s.cube.pe_layout.pe_per_corner,
            lane,
            lane_of,
            attach: Vec::new(),
            nodes_per_cube: nw * nh + s.cube.pe_layout.pes() + 11,
            nodes_per_sip: 0,
        };
        t.nodes_per_sip = 1 + cubes * t.nodes_per_cube;
        t.attach = (0..t.nodes_per_cube)
            .map(|i| t.attach_router(t.slot(i)))
            .collect();
        t
    }

    pub fn cubes_per_sip(&self) -> u32 {
        self.cube_mesh.0 * self.cube_mesh.1
    }

    /// PEs of the whole machine.
    pub fn n_pes(&self) -> u64 {
        u64::from(self.sips) * u64::from(self.cubes_per_sip()) * u64::from(self.pes_per_cube)
    }

    pub fn routers_per_cube(&self) -> u32 {
        self.noc.0 * self.noc.1
    }

    /// Total node ids (some port ids may be absent, see [`Topology::present`]).
    pub fn node_count(&self) -> u32 {
        1 + self.sips * self.nodes_per_sip
    }

    fn slot(&self, i: u32) -> CubeSlot {
        let r = self.routers_per_cube();
        let p = self.pes_per_cube;
        match i {
            i if i < r => CubeSlot::Router(i),
            i if i < r + p => CubeSlot::Pe(i - r),
            i if i == r + p => CubeSlot::MCpu,
            i if i == r + p + 1 => CubeSlot::Sram,
            i if i == r + p + 2 => CubeSlot::Hbm,
            i if i < r + p + 7 => CubeSlot::Ucie(Dir::ALL[(i - r - p - 3) as usize]),
            i => CubeSlot::XSip(Dir::ALL[(i - r - p - 7) as usize]),
        }
    }

    fn slot_index(&self, slot: CubeSlot) -> u32 {
        let r = self.routers_per_cube();
        let p = self.pes_per_cube;
        match slot {
            CubeSlot::Router(i) => i,
            CubeSlot::Pe(i) => r + i,
            CubeSlot::MCpu => r + p,
            CubeSlot::Sram => r + p + 1,
            CubeSlot::Hbm => r + p + 2,
            CubeSlot::Ucie(d) => r + p + 3 + d.index(),
            CubeSlot::XSip(d) => r + p + 7 + d.index(),
        }
    }

    /// The router (index y·w + x) a slot attaches to: PEs to their corner's
    /// router, other endpoints to the router nearest their floorplan position.
    fn attach_router(&self, slot: CubeSlot) -> u32 {
        let (w, h) = self.noc;
        match slot {
            CubeSlot::Router(i) => i,
            CubeSlot::Pe(p) => {
                let corner = p / self.pe_per_corner;
                let x = if corner % 2 == 1 { w - 1 } else { 0 };
                let y = if corner >= 2 { h - 1 } else { 0 };
                y * w + x
            }
            other => {
                let (fx, fy) = floorplan(other);
                nearest(fy, h) * w + nearest(fx, w)
            }
        }
    }

    /// Dense id of a node (the node must exist in this topology). Ids count
    /// the host (0), then per SIP its I/O node and its cubes' blocks of
    /// `nodes_per_cube` slots: this, [`Self::local_id`], [`Self::split`] and
    /// [`Self::node`] are the only places that number nodes.
    pub fn id(&self, n: Node) -> NodeId {
        let (sip, cube, slot) = match n {
            Node::Host => return HOST,
            Node::SipIo { sip } => return NodeId(1 + sip * self.nodes_per_sip),
            Node::Router { sip, cube, x, y } => (sip, cube, CubeSlot::Router(y * self.noc.0 + x)),
            Node::Pe { sip, cube, pe } => (sip, cube, CubeSlot::Pe(pe)),
            Node::MCpu { sip, cube } => (sip, cube, CubeSlot::MCpu),
            Node::Sram { sip, cube } => (sip, cube, CubeSlot::Sram),
            Node::Hbm { sip, cube } => (sip, cube, CubeSlot::Hbm),
            Node::Ucie { sip, cube, dir } => (sip, cube, CubeSlot::Ucie(dir)),
            Node::XSip { sip, cube, dir } => (sip, cube, CubeSlot::XSip(dir)),
        };
        self.local_id(sip, cube, self.slot_index(slot))
    }

    fn local_id(&self, sip: u32, cube: u32, slot: u32) -> NodeId {
        NodeId(1 + sip * self.nodes_per_sip + 1 + cube * self.nodes_per_cube + slot)
    }

    /// (sip, cube, slot index) of a node id inside a cube block.
    fn split(&self, id: NodeId) -> Option<(u32, u32, u32)> {
        let rel = id.0.checked_sub(1)?;
        let (sip, in_sip) = (rel / self.nodes_per_sip, rel % self.nodes_per_sip);
        let in_cubes = in_sip.checked_sub(1)?;
        Some((
            sip,
            in_cubes / self.nodes_per_cube,
            in_cubes % self.nodes_per_cube,
        ))
    }

    /// The node with a dense id.
    pub fn node(&self, id: NodeId) -> Node {
        if id == HOST {
            return Node::Host;
        }
        let Some((sip, cube, slot)) = self.split(id) else {
            return Node::SipIo {
                sip: (id.0 - 1) / self.nodes_per_sip,
            };
        };
        match self.slot(slot) {
            CubeSlot::Router(i) => Node::Router {
                sip,
                cube,
                x: i % self.noc.0,
                y: i / self.noc.0,
            },
            CubeSlot::Pe(pe) => Node::Pe { sip, cube, pe },
            CubeSlot::MCpu => Node::MCpu { sip, cube },
            CubeSlot::Sram => Node::Sram { sip, cube },
            CubeSlot::Hbm => Node::Hbm { sip, cube },
            CubeSlot::Ucie(dir) => Node::Ucie { sip, cube, dir },
            CubeSlot::XSip(dir) => Node::XSip { sip, cube, dir },
        }
    }

    /// The link class (an index into the system's classes, four per SIP
    /// kind, kind-major) of the hop from `a` to its neighbour `b`: between
    /// inter-SIP ports the inter-SIP link of `a`'s SIP, between UCIe ports
    /// UCIe, to or from the host the SIP's PCIe link, else its NoC. Every
    /// link of [`Topology::links`] has the class this names.
    pub fn hop_class(&self, sys: &System, a: NodeId, b: NodeId) -> u8 {
        let (ka, kb) = (self.node(a).kind(), self.node(b).kind());
        let edge = match (ka, kb) {
            (NodeKind::XSipPort, NodeKind::XSipPort) => INTER_SIP,
            (NodeKind::UciePort, NodeKind::UciePort) => UCIE,
            (NodeKind::Host, _) | (_, NodeKind::Host) => PCIE,
            _ => NOC,
        };
        let on_sip = if a == HOST { b } else { a };
        let sip = (on_sip.0 - 1) / self.nodes_per_sip;
        sys.kinds.index_of(sip) as u8 * CLASSES_PER_KIND + edge
    }

    /// The link spec of the hop from `a` to its neighbour `b`
    /// ([`Topology::hop_class`]).
    pub fn hop_spec<'s>(&self, sys: &'s System, a: NodeId, b: NodeId) -> &'s LinkSpec {
        let class = self.hop_class(sys, a, b);
        let kind = &sys.kinds.kinds[usize::from(class / CLASSES_PER_KIND)];
        kind.links.named()[usize::from(edge_kind(class))].1
    }

    /// Whether a node exists: indices in range and, for ports, a peer on the other side.
    pub fn present(&self, n: Node) -> bool {
        let cubes = self.cubes_per_sip();
        let ok = |sip: u32, cube: u32| sip < self.sips && cube < cubes;
        match n {
            Node::Host => true,
            Node::SipIo { sip } => sip < self.sips,
            Node::Router { sip, cube, x, y } => ok(sip, cube) && x < self.noc.0 && y < self.noc.1,
            Node::Pe { sip, cube, pe } => ok(sip, cube) && pe < self.pes_per_cube,
            Node::MCpu { sip, cube } | Node::Sram { sip, cube } | Node::Hbm { sip, cube } => {
                ok(sip, cube)
            }
            Node::Ucie { sip, cube, dir } => {
                ok(sip, cube) && self.cube_neighbor(cube, dir).is_some()
            }
            Node::XSip { sip, cube, dir } => {
                ok(sip, cube) && self.lane[cube as usize] && self.sip_neighbor(sip, dir).is_some()
            }
        }
    }

    /// Looks a node up by name; errors name what is out of range.
    pub fn parse_node(&self, name: &str) -> Result<NodeId, String> {
        let n = Node::parse(name).ok_or_else(|| {
            format!("'{name}' is not a node name; expected e.g. host, sip0.io, sip0.cube0.pe0, sip0.cube0.r0_0, sip0.cube0.hbm, sip0.cube0.xsip_e")
        })?;
        if !self.present(n) {
            return Err(format!(
                "node '{name}' does not exist in this system ({} SIPs, {} cubes/SIP, {} PEs/cube, {}x{} NoC)",
                self.sips,
                self.cubes_per_sip(),
                self.pes_per_cube,
                self.noc.0,
                self.noc.1
            ));
        }
        Ok(self.id(n))
    }

    /// SIP grid coordinates (x, y).
    pub fn sip_coord(&self, sip: u32) -> (u32, u32) {
        (sip % self.grid.0, sip / self.grid.0)
    }

    /// The SIP one hop away in `dir`, per `sips.topology`.
    pub fn sip_neighbor(&self, sip: u32, dir: Dir) -> Option<u32> {
        grid_neighbor(self.kind, self.grid, sip, dir)
    }

    /// The cube one hop away in `dir` inside a SIP (no wrap).
    pub fn cube_neighbor(&self, cube: u32, dir: Dir) -> Option<u32> {
        let (w, h) = self.cube_mesh;
        let (x, y) = (cube % w, cube / w);
        match dir {
            Dir::E => (x + 1 < w).then(|| cube + 1),
            Dir::W => (x > 0).then(|| cube - 1),
            Dir::S => (y + 1 < h).then(|| cube + w),
            Dir::N => (y > 0).then(|| cube - w),
        }
    }

    /// Whether a cube carries inter-SIP lanes.
    pub fn is_lane(&self, cube: u32) -> bool {
        self.lane[cube as usize]
    }

    /// Counts of present nodes by kind.
    pub fn node_counts(&self) -> Vec<(NodeKind, u64)> {
        let sips = self.sips as u64;
        let cubes = sips * self.cubes_per_sip() as u64;
        let mut ucie = 0u64;
        for c in 0..self.cubes_per_sip() {
            ucie += Dir::ALL
                .iter()
                .filter(|&&d| self.cube_neighbor(c, d).is_some())
                .count() as u64;
        }
        let lanes = self.lane.iter().filter(|&&l| l).count() as u64;
        let mut xsip_dirs = 0u64;
        for s in 0..self.sips {
            xsip_dirs += Dir::ALL
                .iter()
                .filter(|&&d| self.sip_neighbor(s, d).is_some())
                .count() as u64;
        }
        vec![
            (NodeKind::Host, 1),
            (NodeKind::SipIo, sips),
            (NodeKind::Router, cubes * self.routers_per_cube() as u64),
            (NodeKind::Pe, cubes * self.pes_per_cube as u64),
            (NodeKind::MCpu, cubes),
            (NodeKind::Sram, cubes),
            (NodeKind::Hbm, cubes),
            (NodeKind::UciePort, sips * ucie),
            (NodeKind::XSipPort, xsip_dirs * lanes),
        ]
    }

    /// The I/O node's router: the M_CPU's router of cube 0.
    fn io_router(&self, sip: u32) -> NodeId {
        self.local_id(
            sip,
            0,
            self.attach[self.slot_index(CubeSlot::MCpu) as usize],
        )
    }

    /// All directed links of the system, edge-kind classes from the spec.
    pub fn links(&self, sys: &System) -> Result<LinkTable, TopologyError> {
        let mut b = LinkTableBuilder::new(self.node_count(), link_classes(sys)?);
        // Class offset of a SIP's links: its kind's four classes.
        let kc = |sip: u32| sys.kinds.index_of(sip) as u8 * CLASSES_PER_KIND;
        let (nw, nh) = self.noc;
        let per_cube = 2 * ((nw - 1) * nh + nw * (nh - 1) + self.nodes_per_cube) as usize + 8;
        b.reserve(self.sips as usize * (self.cubes_per_sip() as usize * per_cube + 2));
        for s in 0..self.sips {
            let k = kc(s);
            let io = self.id(Node::SipIo { sip: s });
            b.duplex(HOST, io, k + PCIE);
            b.duplex(io, self.io_router(s), k + NOC);
            for c in 0..self.cubes_per_sip() {
                let id = |slot: CubeSlot| self.local_id(s, c, self.slot_index(slot));
                for y in 0..nh {
                    for x in 0..nw {
                        let r = y * nw + x;
                        if x + 1 < nw {
                            b.duplex(
                                id(CubeSlot::Router(r)),
                                id(CubeSlot::Router(r + 1)),
                                k + NOC,
                            );
                        }
                        if y + 1 < nh {
                            b.duplex(
                                id(CubeSlot::Router(r)),
                                id(CubeSlot::Router(r + nw)),
                                k + NOC,
                            );
                        }
                    }
                }
                for i in self.routers_per_cube()..self.nodes_per_cube {
                    let (node, slot) = (self.local_id(s, c, i), self.slot(i));
                    if self.present(self.node(node)) {
                        b.duplex(node, id(CubeSlot::Router(self.attach[i as usize])), k + NOC);
                    }
                    match slot {
                        CubeSlot::Ucie(d @ (Dir::E | Dir::S)) => {
                            if let Some(peer) = self.cube_neighbor(c, d) {
                                let p = self.local_id(
                                    s,
                                    peer,
                                    self.slot_index(CubeSlot::Ucie(d.opposite())),
                                );
                                b.duplex(node, p, k + UCIE);
                            }
                        }
                        CubeSlot::XSip(d) if self.lane[c as usize] => {
                            // Each port owns its outgoing link; the peer's port of the
                            // opposite direction owns the way back.
                            if let Some(peer) = self.sip_neighbor(s, d) {
                                let p = self.local_id(
                                    peer,
                                    c,
                                    self.slot_index(CubeSlot::XSip(d.opposite())),
                                );
                                b.link(node, p, k + INTER_SIP);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(b.build())
    }
}

/// The link classes of every SIP kind: four per kind (noc, ucie, inter_sip,
/// pcie), kind-major; a kind's classes are named `noc:KIND` and so on.
fn link_classes(sys: &System) -> Result<Vec<LinkClass>, TopologyError> {
    let tick_ps = (sys.spec.system.tick_ns * 1000.0).round() as u64;
    let mut classes = Vec::new();
    for (k, kind) in sys.kinds.kinds.iter().enumerate() {
        for (edge, spec) in kind.links.named() {
            let (field, name) = if k == 0 {
                (format!("links.{edge}"), edge.to_string())
            } else {
                (
                    format!("sip_kinds.{}.links.{edge}", kind.name),
                    format!("{edge}:{}", kind.name),
                )
            };
            classes.push(link_class(&field, &name, spec, tick_ps, &sys.origin)?);
        }
    }
    Ok(classes)
}

/// Memory-port timing of the three spaces (tcm, sram, hbm) of every SIP
/// kind, kind-major, for `MemPorts`.
pub fn memory_classes(sys: &System) -> Result<Vec<[LinkClass; 3]>, TopologyError> {
    sys.kinds
        .kinds
        .iter()
        .enumerate()
        .map(|(k, kind)| {
            let prefix = if k == 0 {
                "memory".to_string()
            } else {
                format!("sip_kinds.{}.memory", kind.name)
            };
            kind_memory_classes(sys, &prefix, &kind.memory)
        })
        .collect()
}

fn kind_memory_classes(
    sys: &System,
    prefix: &str,
    m: &crate::spec::Memories,
) -> Result<[LinkClass; 3], TopologyError> {
    let tick_ps = (sys.spec.system.tick_ns * 1000.0).round() as u64;
    let class = |name: &str, mem: &crate::spec::MemSpec| {
        let as_link = LinkSpec {
            bandwidth_gbps: mem.bandwidth_gbps,
            latency_ns: mem.latency_ns,
            packet_bytes: u64::MAX,
            ideal: mem.ideal,
        };
        link_class(
            &format!("{prefix}.{name}"),
            name,
            &as_link,
            tick_ps,
            &sys.origin,
        )
    };
    let [tcm, sram, hbm] = m.named().map(|(name, mem)| class(name, mem));
    Ok([tcm?, sram?, hbm?])
}

/// Ticks of a duration in ns, rounded up.
pub fn ns_to_ticks(sys: &System, ns: f64) -> u64 {
    let tick_ps = (sys.spec.system.tick_ns * 1000.0).round() as u64;
    ((ns * 1000.0).round() as u64).div_ceil(tick_ps)
}

/// The SIP one hop from `sip` in `dir` on a `grid` of the given kind: rings
/// and tori wrap, meshes do not; y grows southwards.
pub fn grid_neighbor(kind: SipTopology, grid: (u32, u32), sip: u32, dir: Dir) -> Option<u32> {
    let (w, h) = grid;
    let (x, y) = (sip % w, sip / w);
    let wrap = !matches!(kind, SipTopology::Mesh2dNoWrap);
    let step = |v: u32, n: u32, fwd: bool| -> Option<u32> {
        match (fwd, wrap) {
            _ if n < 2 => None,
            (true, _) if v + 1 < n => Some(v + 1),
            (true, true) => Some(0),
            (false, _) if v > 0 => Some(v - 1),
            (false, true) => Some(n - 1),
            _ => None,
        }
    };
    match dir {
        Dir::E => step(x, w, true).map(|nx| y * w + nx),
        Dir::W => step(x, w, false).map(|nx| y * w + nx),
        Dir::S => step(y, h, true).map(|ny| ny * w + x),
        Dir::N => step(y, h, false).map(|ny| ny * w + x),
    }
}

/// Converts a link spec (or a memory, as a link without packets) into engine
/// ticks: `ser(s) = ⌈s·den/num⌉` with num/den = bytes per tick as a reduced
/// fraction, latency rounded up to ticks. `field` names the spec entry in errors.
pub fn link_class(
    field: &str,
    name: &str,
    spec: &LinkSpec,
    tick_ps: u64,
    origin: &str,
) -> Result<LinkClass, TopologyError> {
    let bytes_per_s = (spec.bandwidth_gbps * 1e9).round() as u128;
    let (mut num, mut den) = (bytes_per_s * tick_ps as u128, 1_000_000_000_000u128);
    let g = gcd(num, den);
    (num, den) = (num / g, den / g);
    let err = |problem: String| TopologyError {
        origin: origin.to_string(),
        field: format!("{field}.bandwidth_gbps"),
        problem,
    };
    if num == 0 {
        return Err(err(
            "bandwidth rounds to 0 bytes/s; use at least 1e-9 GB/s".into()
        ));
    }
    let (num, den) = (u64::try_from(num), u64::try_from(den));
    let (Ok(num), Ok(den)) = (num, den) else {
        return Err(err(format!(
            "{} GB/s with a {tick_ps} ps tick is not representable as a 64-bit bytes-per-tick fraction; use fewer decimal places",
            spec.bandwidth_gbps
        )));
    };
    let latency_ps = (spec.latency_ns * 1000.0).round() as u64;
    Ok(LinkClass {
        name: name.to_string(),
        latency: latency_ps.div_ceil(tick_ps),
        rate_num: num,
        rate_den: den,
        packet_bytes: spec.packet_bytes,
        ideal: spec.ideal,
    })
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
