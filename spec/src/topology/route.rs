//! Deterministic shortest-path routing from coordinates, cached per
//! pair by the engine. Rules (docs/model.md §Routing):
//! - inside a cube: XY dimension order over the router mesh;
//! - between cubes of a SIP: XY over the cube mesh through UCIe ports;
//! - between SIPs: traffic leaves through its cube's inter-SIP lane (or the
//!   nearest lane cube), crosses SIPs in dimension order X then Y, taking the
//!   shorter way round on rings and tori (ties go east/south), and stays on the
//!   same lane cube until the destination SIP;
//! - the host reaches a SIP through PCIe to `sip{s}.io`, which hangs off the
//!   router of cube 0's M_CPU.

use super::{Dir, Node, Topology};
use crate::spec::SipTopology;
use kernbench_systems::{NodeId, RouteSource};

/// A position on the NoC: (sip, cube, router index).
type At = (u32, u32, u32);

impl Topology {
    /// The router a node enters the network at, or None for the host / SIP I/O.
    pub(super) fn entry(&self, n: Node) -> Option<At> {
        let id = self.id(n);
        let (sip, cube, slot) = self.split(id)?;
        Some((sip, cube, self.attach[slot as usize]))
    }

    fn router_id(&self, (s, c, r): At) -> NodeId {
        self.local_id(s, c, r)
    }

    /// Appends the XY router walk from `from` to router `to` of the same cube.
    fn noc_walk(&self, out: &mut Vec<NodeId>, (s, c, r): At, to: u32) {
        let w = self.noc.0;
        let (mut x, mut y) = (r % w, r / w);
        let (tx, ty) = (to % w, to / w);
        while x != tx {
            x = if tx > x { x + 1 } else { x - 1 };
            out.push(self.router_id((s, c, y * w + x)));
        }
        while y != ty {
            y = if ty > y { y + 1 } else { y - 1 };
            out.push(self.router_id((s, c, y * w + x)));
        }
    }

    /// Leaves cube `at` through its `port` in `dir` and enters the peer's port
    /// of the opposite direction; returns the position on the peer's NoC.
    fn cross(&self, out: &mut Vec<NodeId>, at: At, dir: Dir, xsip: bool) -> At {
        let (s, c, _) = at;
        let (port, peer) = if xsip {
            let peer_sip = self
                .sip_neighbor(s, dir)
                .expect("route steps only to existing SIPs");
            (
                Node::XSip {
                    sip: s,
                    cube: c,
                    dir,
                },
                Node::XSip {
                    sip: peer_sip,
                    cube: c,
                    dir: dir.opposite(),
                },
            )
        } else {
            let peer_cube = self
                .cube_neighbor(c, dir)
                .expect("route steps only to existing cubes");
            (
                Node::Ucie {
                    sip: s,
                    cube: c,
                    dir,
                },
                Node::Ucie {
                    sip: s,
                    cube: peer_cube,
                    dir: dir.opposite(),
                },
            )
        };
        let port_at = self.entry(port).expect("ports are in a cube");
        self.noc_walk(out, at, port_at.2);
        out.push(self.id(port));
        out.push(self.id(peer));
        let next = self.entry(peer).expect("ports are in a cube");
        out.push(self.router_id(next));
        next
    }

    /// Appends the XY cube walk from `at` to cube `to` of the same SIP.
    fn cube_walk(&self, out: &mut Vec<NodeId>, mut at: At, to: u32) -> At {
        let w = self.cube_mesh.0;
        while at.1 % w != to % w {
            let dir = if to % w > at.1 % w { Dir::E } else { Dir::W };
            at = self.cross(out, at, dir, false);
        }
        while at.1 / w != to / w {
            let dir = if to / w > at.1 / w { Dir::S } else { Dir::N };
            at = self.cross(out, at, dir, false);
        }
        at
    }

    /// SIP-level steps from `a` to `b`: X first, then Y.
    pub fn sip_steps(&self, a: u32, b: u32) -> Vec<Dir> {
        let (ax, ay) = self.sip_coord(a);
        let (bx, by) = self.sip_coord(b);
        let wrap = !matches!(self.kind, SipTopology::Mesh2dNoWrap);
        let axis = |from: u32, to: u32, n: u32, fwd: Dir, back: Dir| -> (Dir, u32) {
            let f = (to + n - from) % n;
            if wrap {
                if f <= n - f { (fwd, f) } else { (back, n - f) }
            } else if to >= from {
                (fwd, to - from)
            } else {
                (back, from - to)
            }
        };
        let (dx, nx) = axis(ax, bx, self.grid.0, Dir::E, Dir::W);
        let (dy, ny) = axis(ay, by, self.grid.1, Dir::S, Dir::N);
        let mut steps = vec![dx; nx as usize];
        steps.extend(std::iter::repeat_n(dy, ny as usize));
        steps
    }

    /// Appends the route between two positions on the NoC (excluding `from`).
    fn walk(&self, out: &mut Vec<NodeId>, from: At, to: At) {
        let mut at = from;
        if at.0 != to.0 {
            at = self.cube_walk(out, at, self.lane_of[at.1 as usize]);
            for dir in self.sip_steps(at.0, to.0) {
                at = self.cross(out, at, dir, true);
            }
        }
        at = self.cube_walk(out, at, to.1);
        self.noc_walk(out, at, to.2);
    }

    /// Where the host's traffic enters SIP `sip`'s NoC, after host → io.
    fn io_at(&self, sip: u32) -> At {
        (
            sip,
            0,
            self.attach[self.slot_index(super::CubeSlot::MCpu) as usize],
        )
    }

    /// Route between two node ids; both must be present.
    fn path(&self, src: NodeId, dst: NodeId, out: &mut Vec<NodeId>) -> Result<(), String> {
        let base = out.len();
        self.raw_path(src, dst, out)?;
        // Only a port endpoint makes the walk pass the same node twice.
        let port = |n: Node| matches!(n, Node::Ucie { .. } | Node::XSip { .. });
        if port(self.node(src)) || port(self.node(dst)) {
            remove_cycles(out, base);
        }
        Ok(())
    }

    /// The walk of the rules above; it revisits a node only when a port is an
    /// endpoint (leaving or entering through the port itself).
    fn raw_path(&self, src: NodeId, dst: NodeId, out: &mut Vec<NodeId>) -> Result<(), String> {
        let (a, b) = (self.node(src), self.node(dst));
        for (n, id) in [(a, src), (b, dst)] {
            if id.index() >= self.node_count() as usize || !self.present(n) {
                return Err(format!("node {id} ({n}) does not exist in this system"));
            }
        }
        out.push(src);
        if src == dst {
            return Ok(());
        }
        if let (Node::SipIo { .. }, Node::Host) = (a, b) {
            out.push(dst);
            return Ok(());
        }
        // Position on the NoC after leaving src; None when src is the host
        // and dst is a SIP I/O node (host → io is one PCIe hop).
        let start = match a {
            Node::Host => {
                let sip = match b {
                    Node::SipIo { sip } => sip,
                    _ => self.entry(b).map(|e| e.0).unwrap_or(0),
                };
                out.push(self.id(Node::SipIo { sip }));
                if b == (Node::SipIo { sip }) {
                    return Ok(());
                }
                self.io_at(sip)
            }
            Node::SipIo { sip } => self.io_at(sip),
            _ => self.entry(a).expect("cube node"),
        };
        if !matches!(a, Node::Router { .. }) {
            out.push(self.router_id(start));
        }
        match b {
            Node::Host | Node::SipIo { .. } => {
                let sip = match b {
                    Node::SipIo { sip } => sip,
                    _ => start.0,
                };
                self.walk(out, start, self.io_at(sip));
                out.push(self.id(Node::SipIo { sip }));
                if b == Node::Host {
                    out.push(super::HOST);
                }
            }
            _ => {
                let end = self.entry(b).expect("cube node");
                self.walk(out, start, end);
                if !matches!(b, Node::Router { .. }) {
                    out.push(dst);
                }
            }
        }
        Ok(())
    }

    /// Route length in hops (links crossed).
    pub fn hops(&self, src: NodeId, dst: NodeId) -> Result<usize, String> {
        let mut v = Vec::new();
        self.path(src, dst, &mut v)?;
        Ok(v.len() - 1)
    }

    /// The longest PE-to-PE route: (hops, src, dst). Evaluated over extreme
    /// candidates (grid corners and the antipodal SIP, corner cubes, one PE per
    /// corner cluster), which by the symmetry of the routes reach the maximum.
    pub fn diameter(&self) -> (usize, NodeId, NodeId) {
        let (w, h) = self.grid;
        let corners = |w: u32, h: u32| {
            let mut v = vec![0, w - 1, (h - 1) * w, h * w - 1];
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut sip_pairs = Vec::new();
        for s in corners(w, h) {
            let (x, y) = self.sip_coord(s);
            let antipode = ((y + h / 2) % h) * w + (x + w / 2) % w;
            for d in corners(w, h).into_iter().chain([antipode]) {
                sip_pairs.push((s, d));
            }
        }
        let cubes = if self.cubes_per_sip() <= 16 {
            (0..self.cubes_per_sip()).collect()
        } else {
            corners(self.cube_mesh.0, self.cube_mesh.1)
        };
        let pes: Vec<u32> = (0..self.pes_per_cube)
            .step_by(self.pe_per_corner as usize)
            .collect();
        let mut best = (0, super::HOST, super::HOST);
        let mut buf = Vec::new();
        for &(s, d) in &sip_pairs {
            for &cs in &cubes {
                for &cd in &cubes {
                    for &ps in &pes {
                        for &pd in &pes {
                            let a = self.id(Node::Pe {
                                sip: s,
                                cube: cs,
                                pe: ps,
                            });
                            let b = self.id(Node::Pe {
                                sip: d,
                                cube: cd,
                                pe: pd,
                            });
                            buf.clear();
                            self.path(a, b, &mut buf).expect("PEs exist");
                            if buf.len() - 1 > best.0 {
                                best = (buf.len() - 1, a, b);
                            }
                        }
                    }
                }
            }
        }
        best
    }
}

/// Cuts every cycle out of `path[base..]`: when a node comes back, the walk
/// resumes from its first visit (loop erasure, linear time).
fn remove_cycles(path: &mut Vec<NodeId>, base: usize) {
    let mut seen: rustc_hash::FxHashMap<NodeId, usize> = rustc_hash::FxHashMap::default();
    let mut out = base;
    for i in base..path.len() {
        let n = path[i];
        if let Some(&j) = seen.get(&n) {
            for erased in &path[j + 1..out] {
                seen.remove(erased);
            }
            out = j + 1;
        } else {
            seen.insert(n, out);
            path[out] = n;
            out += 1;
        }
    }
    path.truncate(out);
}

impl RouteSource for Topology {
    fn route(&self, src: NodeId, dst: NodeId, out: &mut Vec<NodeId>) -> Result<(), String> {
        self.path(src, dst, out)
    }
}
