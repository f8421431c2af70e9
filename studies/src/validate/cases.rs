//! The validation matrix: which runs compare the flow-level network with the
//! packet engine. Every collective × algorithm on small ring, torus and mesh
//! systems, and adversarial traffic built to stress what flow mode
//! approximates: an incast onto one PE, cross traffic on multi-hop routes,
//! short messages beside a long one, credit-starved queues, SIP kinds
//! whose links differ, and a GPT layer whose GEMMs load their operands over
//! a cube mesh.

use kernbench_ccl::{CclConfig, Collective, Job, ReduceOp, algorithms};
use kernbench_spec::spec::SipTopology;

/// The ccl.yaml entries the matrix runs: one per algorithm.
pub const ENTRIES: [&str; 11] = [
    "ring",
    "bidir_ring",
    "tree",
    "rhd",
    "dbtree",
    "dims",
    "hier_lanes",
    "adr0032",
    "pairwise",
    "bruck",
    "torus_trees",
];

/// How big a matrix: `quick` runs in CI, `cubes` is the quick one on SIPs
/// of several cubes in both directions (seconds), `full` is the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matrix {
    Quick,
    Cubes,
    Full,
}

impl Matrix {
    pub fn name(self) -> &'static str {
        match self {
            Matrix::Quick => "quick",
            Matrix::Cubes => "cubes",
            Matrix::Full => "full",
        }
    }

    /// (SIPs, cubes (w, h), bytes) of the collective part.
    fn shapes(self) -> (Vec<u32>, Vec<(u32, u32)>, Vec<u64>) {
        match self {
            Matrix::Quick => (vec![4], vec![(1, 1), (2, 1)], vec![4 << 10, 256 << 10]),
            Matrix::Cubes => (vec![4], vec![(2, 2), (4, 4)], vec![4 << 10, 256 << 10]),
            Matrix::Full => (
                vec![4, 16, 64],
                vec![(1, 1), (2, 2), (4, 4)],
                vec![1 << 10, 64 << 10, 1 << 20, 64 << 20],
            ),
        }
    }
}

/// What one case runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// A collective of a ccl.yaml entry; `n_slots` overrides the entry's.
    Collective {
        collective: Collective,
        entry: String,
        bytes: u64,
        n_slots: Option<u32>,
    },
    /// Messages between PEs (pe0 of the given SIP and cube), each
    /// `(src, dst, bytes, start tick)`.
    Traffic(Vec<(PeAt, PeAt, u64, u64)>),
    /// One GPT layer, forward and backward, on SIP 0 alone (no parallelism):
    /// its GEMMs' operand loads, many at once from every cube's HBM over the
    /// cube mesh, are traffic no collective makes.
    Layer { hidden: usize, seq: usize },
}

/// A PE by (SIP, cube, PE index).
pub type PeAt = (u32, u32, u32);

/// One validation case: its family, its system and its workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub index: usize,
    /// `matrix`, `incast`, `cross_traffic`, `mixed_sizes`, `gemm_loads`,
    /// `credit_starved` or `sip_kinds`.
    pub family: &'static str,
    pub topology: SipTopology,
    pub sips: u32,
    pub cubes: (u32, u32),
    /// Two SIP kinds: SIPs of the second half have inter-SIP links at half
    /// the bandwidth.
    pub kinds: bool,
    pub workload: Workload,
}

impl Case {
    /// What the case runs, for labels and ids.
    pub fn label(&self) -> String {
        let what = match &self.workload {
            Workload::Collective {
                collective,
                entry,
                bytes,
                n_slots,
            } => format!(
                "{} {entry} {bytes}B{}",
                collective.name(),
                n_slots.map_or(String::new(), |n| format!(" {n} slots"))
            ),
            Workload::Traffic(m) => format!("{} messages", m.len()),
            Workload::Layer { hidden, seq } => format!("GPT layer hidden {hidden} seq {seq}"),
        };
        format!(
            "{} {} {} SIPs {}x{} cubes{}: {what}",
            self.family,
            self.topology.name(),
            self.sips,
            self.cubes.0,
            self.cubes.1,
            if self.kinds { " two kinds" } else { "" }
        )
    }

    /// The job of a collective case.
    pub fn job(&self) -> Option<Job> {
        match &self.workload {
            Workload::Collective {
                collective, bytes, ..
            } => Some(Job {
                collective: *collective,
                op: ReduceOp::Sum,
                elems: (*bytes / 2) as usize,
            }),
            Workload::Traffic(_) | Workload::Layer { .. } => None,
        }
    }
}

/// Every case of `matrix`, in a fixed order: the collective matrix, then the
/// adversarial cases (indices are set by the study, which keeps the cases
/// whose algorithm accepts its system's participants).
pub fn cases(matrix: Matrix, ccl: &CclConfig) -> Vec<Case> {
    let mut out = collective_matrix(matrix, ccl);
    out.extend(adversarial(matrix));
    out
}

const TOPOLOGIES: [SipTopology; 3] = [
    SipTopology::Ring1d,
    SipTopology::Torus2d,
    SipTopology::Mesh2dNoWrap,
];

/// Every collective × entry that supports it on each topology, SIP count,
/// cube mesh and size of the matrix.
fn collective_matrix(matrix: Matrix, ccl: &CclConfig) -> Vec<Case> {
    let (sips, cubes, sizes) = matrix.shapes();
    let mut out = Vec::new();
    for topology in TOPOLOGIES {
        for &n in &sips {
            for &cube in &cubes {
                for collective in Collective::ALL {
                    for entry in runnable(ccl, collective, topology) {
                        for &bytes in &sizes {
                            out.push(Case {
                                index: 0,
                                family: "matrix",
                                topology,
                                sips: n,
                                cubes: cube,
                                kinds: false,
                                workload: Workload::Collective {
                                    collective,
                                    entry: entry.into(),
                                    bytes,
                                    n_slots: None,
                                },
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// The entries of [`ENTRIES`] whose algorithm runs `collective` on `topology`.
fn runnable(ccl: &CclConfig, collective: Collective, topology: SipTopology) -> Vec<&'static str> {
    ENTRIES
        .into_iter()
        .filter(|name| {
            let Ok(config) = ccl.entry(name) else {
                return false;
            };
            algorithms::find(&config.algorithm).is_ok_and(|a| {
                a.collectives().contains(&collective) && a.topologies().contains(&topology)
            })
        })
        .collect()
}

/// The adversarial cases; the full matrix runs them larger.
fn adversarial(matrix: Matrix) -> Vec<Case> {
    let scale: u64 = match matrix {
        Matrix::Quick | Matrix::Cubes => 1,
        Matrix::Full => 16,
    };
    let case = |family, topology, sips, cubes, workload| Case {
        index: 0,
        family,
        topology,
        sips,
        cubes,
        kinds: false,
        workload,
    };
    let mut out = vec![
        case(
            "incast",
            SipTopology::Ring1d,
            8,
            (1, 1),
            incast(8, (64 << 10) * scale),
        ),
        case(
            "incast",
            SipTopology::Torus2d,
            4,
            (2, 2),
            incast_cubes(4, 4, (32 << 10) * scale),
        ),
        case(
            "cross_traffic",
            SipTopology::Mesh2dNoWrap,
            16,
            (1, 1),
            cross_traffic(4, (128 << 10) * scale),
        ),
        case(
            "mixed_sizes",
            SipTopology::Ring1d,
            4,
            (1, 1),
            mixed_sizes((1 << 20) * scale.min(4), 4 << 10, 32),
        ),
        case(
            "gemm_loads",
            SipTopology::Ring1d,
            4,
            (4, 4),
            Workload::Layer {
                hidden: 1024 * scale.min(2) as usize,
                seq: 512 * scale.min(2) as usize,
            },
        ),
    ];
    for n_slots in [1, 2] {
        for (collective, entry) in [
            (Collective::AllReduce, "ring"),
            (Collective::AllToAll, "pairwise"),
        ] {
            out.push(case(
                "credit_starved",
                SipTopology::Torus2d,
                4,
                (2, 1),
                Workload::Collective {
                    collective,
                    entry: entry.into(),
                    bytes: (256 << 10) * scale.min(4),
                    n_slots: Some(n_slots),
                },
            ));
        }
    }
    for entry in ["ring", "hier_lanes"] {
        out.push(Case {
            kinds: true,
            ..case(
                "sip_kinds",
                SipTopology::Ring1d,
                4,
                (2, 1),
                Workload::Collective {
                    collective: Collective::AllReduce,
                    entry: entry.into(),
                    bytes: (256 << 10) * scale.min(4),
                    n_slots: None,
                },
            )
        });
    }
    out
}

/// Every SIP but 0 sends `bytes` from its pe0 to SIP 0's pe0 at tick 0.
fn incast(sips: u32, bytes: u64) -> Workload {
    Workload::Traffic(
        (1..sips)
            .map(|s| ((s, 0, 0), (0, 0, 0), bytes, 0))
            .collect(),
    )
}

/// Every cube of every SIP sends `bytes` to SIP 0, cube 0, pe0 at tick 0.
fn incast_cubes(sips: u32, cubes: u32, bytes: u64) -> Workload {
    let senders = (0..sips).flat_map(|s| (0..cubes).map(move |c| (s, c, 0)));
    let to = (0, 0, 0);
    Workload::Traffic(
        senders
            .filter(|&p| p != to)
            .map(|p| (p, to, bytes, 0))
            .collect(),
    )
}

/// On a `side` × `side` grid: each row's west end sends to its east end and
/// each column's north end to its south end, all at once, so routes cross
/// and share their links with the turns of others.
fn cross_traffic(side: u32, bytes: u64) -> Workload {
    let at = |x: u32, y: u32| (y * side + x, 0, 0);
    let rows = (0..side).map(|y| (at(0, y), at(side - 1, y), bytes, 0));
    let cols = (0..side).map(|x| (at(x, 0), at(x, side - 1), bytes / 2, 0));
    let diagonal = (at(0, 0), at(side - 1, side - 1), bytes, 0);
    Workload::Traffic(rows.chain(cols).chain([diagonal]).collect())
}

/// One long message from SIP 0 to SIP 2 and `short` short ones from SIP 1
/// to SIP 2, started 100 ticks apart while the long one is in flight.
fn mixed_sizes(long: u64, short_bytes: u64, short: u64) -> Workload {
    let long_message = ((0, 0, 0), (2, 0, 0), long, 0);
    let shorts = (0..short).map(|k| ((1, 0, 0), (2, 0, 0), short_bytes, 100 * k));
    Workload::Traffic([long_message].into_iter().chain(shorts).collect())
}
