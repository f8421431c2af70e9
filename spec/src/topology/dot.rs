//! Graphviz views, projections of the compiled topology: the SIP-level network
//! and one cube's NoC.

use super::{Dir, Node, Topology};
use std::fmt::Write;

impl Topology {
    /// SIPs as nodes placed on their grid, one edge per inter-SIP lane pair.
    pub fn sip_dot(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "graph sips {{");
        let _ = writeln!(
            s,
            "  label=\"{} SIPs, {} ({}x{}), {} lane cube(s) per SIP\"; layout=neato; node [shape=box];",
            self.sips,
            self.kind.name(),
            self.grid.0,
            self.grid.1,
            (0..self.cubes_per_sip())
                .filter(|&c| self.is_lane(c))
                .count()
        );
        for sip in 0..self.sips {
            let (x, y) = self.sip_coord(sip);
            let _ = writeln!(s, "  sip{sip} [pos=\"{},{}!\"];", x * 2, -(y as i64) * 2);
        }
        for sip in 0..self.sips {
            for dir in [Dir::E, Dir::S] {
                if let Some(peer) = self.sip_neighbor(sip, dir) {
                    let _ = writeln!(s, "  sip{sip} -- sip{peer} [label=\"{}\"];", dir.letter());
                }
            }
        }
        s.push_str("}\n");
        s
    }

    /// One cube's routers, endpoints and ports, with router positions.
    pub fn cube_dot(&self, sip: u32, cube: u32) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "graph cube {{");
        let _ = writeln!(
            s,
            "  label=\"sip{sip}.cube{cube} NoC: {}x{} routers, {} PEs\"; layout=neato; overlap=false;",
            self.noc.0, self.noc.1, self.pes_per_cube
        );
        let q = |n: Node| format!("\"{n}\"");
        for y in 0..self.noc.1 {
            for x in 0..self.noc.0 {
                let r = Node::Router { sip, cube, x, y };
                let _ = writeln!(
                    s,
                    "  {} [shape=circle, pos=\"{},{}!\"];",
                    q(r),
                    x * 3,
                    -(y as i64) * 3
                );
            }
        }
        for y in 0..self.noc.1 {
            for x in 0..self.noc.0 {
                let r = Node::Router { sip, cube, x, y };
                if x + 1 < self.noc.0 {
                    let _ = writeln!(
                        s,
                        "  {} -- {};",
                        q(r),
                        q(Node::Router {
                            sip,
                            cube,
                            x: x + 1,
                            y
                        })
                    );
                }
                if y + 1 < self.noc.1 {
                    let _ = writeln!(
                        s,
                        "  {} -- {};",
                        q(r),
                        q(Node::Router {
                            sip,
                            cube,
                            x,
                            y: y + 1
                        })
                    );
                }
            }
        }
        let mut endpoints: Vec<Node> = (0..self.pes_per_cube)
            .map(|pe| Node::Pe { sip, cube, pe })
            .collect();
        endpoints.extend([
            Node::MCpu { sip, cube },
            Node::Sram { sip, cube },
            Node::Hbm { sip, cube },
        ]);
        for dir in Dir::ALL {
            endpoints.push(Node::Ucie { sip, cube, dir });
            endpoints.push(Node::XSip { sip, cube, dir });
        }
        for n in endpoints.into_iter().filter(|&n| self.present(n)) {
            let (_, _, r) = self.entry(n).expect("cube node");
            let router = Node::Router {
                sip,
                cube,
                x: r % self.noc.0,
                y: r / self.noc.0,
            };
            let shape = match n {
                Node::Pe { .. } => "box",
                Node::Ucie { .. } | Node::XSip { .. } => "diamond",
                _ => "cylinder",
            };
            let _ = writeln!(s, "  {} [shape={shape}];", q(n));
            let _ = writeln!(s, "  {} -- {};", q(n), q(router));
        }
        s.push_str("}\n");
        s
    }
}
