//! Node kinds and the naming convention (docs/ARCHITECTURE.md §Naming):
//!
//! | node | name |
//! |---|---|
//! | host | `host` |
//! | SIP I/O (PCIe endpoint) | `sip{s}.io` |
//! | NoC router at (x, y) | `sip{s}.cube{c}.r{x}_{y}` |
//! | PE | `sip{s}.cube{c}.pe{p}` |
//! | M_CPU, SRAM, HBM | `sip{s}.cube{c}.mcpu` / `.sram` / `.hbm` |
//! | UCIe port | `sip{s}.cube{c}.ucie_{n,e,s,w}` |
//! | inter-SIP port | `sip{s}.cube{c}.xsip_{n,e,s,w}` |
//!
//! Cube ids are row-major in the cube mesh; y grows southwards.

use std::fmt;

/// A compass direction on a mesh (y grows southwards).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    N,
    E,
    S,
    W,
}

impl Dir {
    pub const ALL: [Dir; 4] = [Dir::N, Dir::E, Dir::S, Dir::W];

    pub fn opposite(self) -> Dir {
        match self {
            Dir::N => Dir::S,
            Dir::S => Dir::N,
            Dir::E => Dir::W,
            Dir::W => Dir::E,
        }
    }

    pub fn index(self) -> u32 {
        self as u32
    }

    pub fn letter(self) -> &'static str {
        ["n", "e", "s", "w"][self as usize]
    }

    fn from_letter(s: &str) -> Option<Dir> {
        Dir::ALL.into_iter().find(|d| d.letter() == s)
    }
}

/// What a node is, with its indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    Host,
    SipIo { sip: u32 },
    Router { sip: u32, cube: u32, x: u32, y: u32 },
    Pe { sip: u32, cube: u32, pe: u32 },
    MCpu { sip: u32, cube: u32 },
    Sram { sip: u32, cube: u32 },
    Hbm { sip: u32, cube: u32 },
    Ucie { sip: u32, cube: u32, dir: Dir },
    XSip { sip: u32, cube: u32, dir: Dir },
}

/// Node kinds, for counts and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    Host,
    SipIo,
    Router,
    Pe,
    MCpu,
    Sram,
    Hbm,
    UciePort,
    XSipPort,
}

impl NodeKind {
    pub const ALL: [NodeKind; 9] = [
        NodeKind::Host,
        NodeKind::SipIo,
        NodeKind::Router,
        NodeKind::Pe,
        NodeKind::MCpu,
        NodeKind::Sram,
        NodeKind::Hbm,
        NodeKind::UciePort,
        NodeKind::XSipPort,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Host => "host",
            NodeKind::SipIo => "sip_io",
            NodeKind::Router => "router",
            NodeKind::Pe => "pe",
            NodeKind::MCpu => "m_cpu",
            NodeKind::Sram => "sram",
            NodeKind::Hbm => "hbm",
            NodeKind::UciePort => "ucie_port",
            NodeKind::XSipPort => "inter_sip_port",
        }
    }
}

impl Node {
    pub fn kind(&self) -> NodeKind {
        match self {
            Node::Host => NodeKind::Host,
            Node::SipIo { .. } => NodeKind::SipIo,
            Node::Router { .. } => NodeKind::Router,
            Node::Pe { .. } => NodeKind::Pe,
            Node::MCpu { .. } => NodeKind::MCpu,
            Node::Sram { .. } => NodeKind::Sram,
            Node::Hbm { .. } => NodeKind::Hbm,
            Node::Ucie { .. } => NodeKind::UciePort,
            Node::XSip { .. } => NodeKind::XSipPort,
        }
    }

    /// Parses a name written by `Display`.
    pub fn parse(name: &str) -> Option<Node> {
        if name == "host" {
            return Some(Node::Host);
        }
        let rest = name.strip_prefix("sip")?;
        let (sip, rest) = rest.split_once('.')?;
        let sip: u32 = sip.parse().ok()?;
        if rest == "io" {
            return Some(Node::SipIo { sip });
        }
        let rest = rest.strip_prefix("cube")?;
        let (cube, part) = rest.split_once('.')?;
        let cube: u32 = cube.parse().ok()?;
        Some(match part {
            "mcpu" => Node::MCpu { sip, cube },
            "sram" => Node::Sram { sip, cube },
            "hbm" => Node::Hbm { sip, cube },
            _ => {
                if let Some(p) = part.strip_prefix("pe") {
                    Node::Pe {
                        sip,
                        cube,
                        pe: p.parse().ok()?,
                    }
                } else if let Some(d) = part.strip_prefix("ucie_") {
                    Node::Ucie {
                        sip,
                        cube,
                        dir: Dir::from_letter(d)?,
                    }
                } else if let Some(d) = part.strip_prefix("xsip_") {
                    Node::XSip {
                        sip,
                        cube,
                        dir: Dir::from_letter(d)?,
                    }
                } else {
                    let (x, y) = part.strip_prefix('r')?.split_once('_')?;
                    Node::Router {
                        sip,
                        cube,
                        x: x.parse().ok()?,
                        y: y.parse().ok()?,
                    }
                }
            }
        })
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Node::Host => write!(f, "host"),
            Node::SipIo { sip } => write!(f, "sip{sip}.io"),
            Node::Router { sip, cube, x, y } => write!(f, "sip{sip}.cube{cube}.r{x}_{y}"),
            Node::Pe { sip, cube, pe } => write!(f, "sip{sip}.cube{cube}.pe{pe}"),
            Node::MCpu { sip, cube } => write!(f, "sip{sip}.cube{cube}.mcpu"),
            Node::Sram { sip, cube } => write!(f, "sip{sip}.cube{cube}.sram"),
            Node::Hbm { sip, cube } => write!(f, "sip{sip}.cube{cube}.hbm"),
            Node::Ucie { sip, cube, dir } => write!(f, "sip{sip}.cube{cube}.ucie_{}", dir.letter()),
            Node::XSip { sip, cube, dir } => write!(f, "sip{sip}.cube{cube}.xsip_{}", dir.letter()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let nodes = [
            Node::Host,
            Node::SipIo { sip: 3 },
            Node::Router {
                sip: 1,
                cube: 15,
                x: 2,
                y: 0,
            },
            Node::Pe {
                sip: 4095,
                cube: 7,
                pe: 6,
            },
            Node::MCpu { sip: 0, cube: 0 },
            Node::Sram { sip: 2, cube: 1 },
            Node::Hbm { sip: 2, cube: 9 },
            Node::Ucie {
                sip: 0,
                cube: 5,
                dir: Dir::W,
            },
            Node::XSip {
                sip: 9,
                cube: 10,
                dir: Dir::S,
            },
        ];
        for n in nodes {
            assert_eq!(Node::parse(&n.to_string()), Some(n), "{n}");
        }
        for bad in [
            "",
            "hostx",
            "sip.io",
            "sip1.cube2.pe",
            "sip1.cube2.ucie_q",
            "sip1.cube2.r1",
        ] {
            assert_eq!(Node::parse(bad), None, "{bad}");
        }
    }
}
