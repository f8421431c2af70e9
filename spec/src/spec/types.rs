//! Serde types of the system spec (`configs/topology.yaml`).
//!
//! Units are in the field names: `_gbps` = 1e9 bytes/s, `_ns` = nanoseconds,
//! `_bytes` = bytes. Every struct rejects unknown fields so a typo is an error,
//! never a silently ignored setting.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The whole system spec: one YAML document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemSpec {
    pub system: SystemSection,
    pub sip: SipSection,
    pub cube: CubeSection,
    pub memory: Memories,
    pub links: LinkKinds,
    pub pe: PeSpec,
    /// Sizes of control messages (defaults apply when omitted).
    #[serde(default)]
    pub control: ControlSpec,
    /// Kinds of SIP with other parameters (a heterogeneous system; see
    /// `spec::kinds`); `system.sips.kinds` says which SIPs have which.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sip_kinds: BTreeMap<String, super::kinds::SipKindSpec>,
    /// How the simulator moves messages (default: packets).
    #[serde(default, skip_serializing_if = "NetworkSpec::is_default")]
    pub network: NetworkSpec,
    /// How the simulator advances time (default: periods skipped when a
    /// run repeats).
    #[serde(default, skip_serializing_if = "SimulationSpec::is_default")]
    pub simulation: SimulationSpec,
}

/// `simulation: { fast_forward: true | false, fold: false | true, compute:
/// tiled | measured }`.
/// `fast_forward`: whether a timing-only run whose whole state repeats skips
/// the repeating periods (exact either way: docs/model.md §Fast-forward);
/// `false` simulates every period, to check that or to time the engine.
/// `fold`: whether a collective that runs the same program on every SIP of a
/// ring or torus, shifted, runs on the smallest torus that repeats it
/// (docs/model.md §Fold); off by default. `compute`: how compute kernels
/// are timed (see [`ComputeModel`]); when absent, each command's default
/// ([`SimulationSpec::compute_model`] for a machine: tiled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulationSpec {
    #[serde(default = "default_fast_forward")]
    pub fast_forward: bool,
    #[serde(default)]
    pub fold: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<ComputeModel>,
}

/// How a compute kernel (one that sends nothing through the IPCQ) is
/// timed (docs/model.md §Measured compute).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeModel {
    /// Every op of every launch runs: loads cross the network, exact.
    #[default]
    Tiled,
    /// Each distinct kernel runs once alone on a scratch machine; every
    /// launch of it then occupies each PE for the ticks it took there.
    /// Timing only: no values are computed.
    Measured,
}

impl ComputeModel {
    /// The spec's spelling, as results record it.
    pub fn name(self) -> &'static str {
        match self {
            ComputeModel::Tiled => "tiled",
            ComputeModel::Measured => "measured",
        }
    }
}

fn default_fast_forward() -> bool {
    true
}

impl Default for SimulationSpec {
    fn default() -> Self {
        Self {
            fast_forward: true,
            fold: false,
            compute: None,
        }
    }
}

impl SimulationSpec {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The compute model a machine runs: the spec's, tiled if it names none.
    pub fn compute_model(&self) -> ComputeModel {
        self.compute.unwrap_or_default()
    }
}

/// The network fidelity of a run: `network: { model: packet | flow,
/// leg_span_ticks: N }`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// `packet`: exact store-and-forward packets; `flow`: a message drains
    /// as a few max-min fair flows, for large systems (docs/model.md
    /// §Flow-level network).
    #[serde(default)]
    pub model: kernbench_systems::network::NetworkModel,
    /// Flow mode: how far apart, in ticks, a message's first packet may
    /// reach the links of one leg (default 20; 0: a leg per link, the
    /// closest to packets; larger: fewer legs, faster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leg_span_ticks: Option<u64>,
}

impl NetworkSpec {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Sizes of the small messages the model sends besides data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlSpec {
    /// One IPCQ credit, receiver to sender.
    #[serde(default = "default_credit_bytes")]
    pub credit_bytes: u64,
    /// One neighbour-table entry of an install message from the host.
    #[serde(default = "default_install_entry_bytes")]
    pub install_entry_bytes: u64,
    /// A kernel launch message from the host to one PE.
    #[serde(default = "default_launch_bytes")]
    pub launch_bytes: u64,
}

fn default_credit_bytes() -> u64 {
    16
}

fn default_install_entry_bytes() -> u64 {
    32
}

fn default_launch_bytes() -> u64 {
    64
}

impl Default for ControlSpec {
    fn default() -> Self {
        Self {
            credit_bytes: default_credit_bytes(),
            install_entry_bytes: default_install_entry_bytes(),
            launch_bytes: default_launch_bytes(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemSection {
    pub sips: SipsSpec,
    /// Length of one simulated tick in nanoseconds (default 1.0).
    #[serde(default = "default_tick_ns")]
    pub tick_ns: f64,
}

fn default_tick_ns() -> f64 {
    1.0
}

/// How many SIPs (devices, = ranks) and how they are wired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SipsSpec {
    pub count: u32,
    pub topology: SipTopology,
    /// Grid width for 2D topologies (w·h = count). Omit both w and h for the square fallback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w: Option<u32>,
    /// Grid height for 2D topologies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h: Option<u32>,
    /// Cubes (by id, row-major in the cube mesh) that carry an inter-SIP lane to the
    /// same cube of each neighbouring SIP. Omitted = every cube has its own lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_sip_cubes: Option<Vec<u32>>,
    /// SIP ids (or ranges "a..b") per kind of `sip_kinds`; SIPs not listed
    /// have the spec's own parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<BTreeMap<String, Vec<super::kinds::SipIds>>>,
}

/// The SIP-level network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SipTopology {
    /// A bidirectional ring of `count` SIPs.
    #[serde(rename = "ring_1d")]
    Ring1d,
    /// A w×h grid with wrap-around links in both dimensions.
    #[serde(rename = "torus_2d")]
    Torus2d,
    /// A w×h grid without wrap-around.
    #[serde(rename = "mesh_2d_no_wrap")]
    Mesh2dNoWrap,
}

impl SipTopology {
    pub const NAMES: [&'static str; 3] = ["ring_1d", "torus_2d", "mesh_2d_no_wrap"];

    pub fn name(self) -> &'static str {
        match self {
            SipTopology::Ring1d => "ring_1d",
            SipTopology::Torus2d => "torus_2d",
            SipTopology::Mesh2dNoWrap => "mesh_2d_no_wrap",
        }
    }

    pub fn is_2d(self) -> bool {
        !matches!(self, SipTopology::Ring1d)
    }
}

/// A w×h grid (cube mesh of a SIP, router mesh of a cube).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mesh {
    pub w: u32,
    pub h: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SipSection {
    pub cube_mesh: Mesh,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CubeSection {
    pub pe_layout: PeLayout,
    /// Router mesh of the cube NoC (default 3×3: PE clusters on the corners,
    /// HBM/SRAM in the centre, UCIe and inter-SIP ports on the edge midpoints).
    #[serde(default = "default_noc_mesh")]
    pub noc_mesh: Mesh,
}

fn default_noc_mesh() -> Mesh {
    Mesh { w: 3, h: 3 }
}

/// PEs per cube = pe_per_corner × corners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeLayout {
    pub pe_per_corner: u32,
    /// 1 to 4 corners of the cube (NW, NE, SW, SE in that order).
    pub corners: u32,
}

impl PeLayout {
    pub fn pes(&self) -> u32 {
        self.pe_per_corner * self.corners
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memories {
    /// Per-PE scratchpad.
    pub tcm: MemSpec,
    /// Per-cube shared SRAM.
    pub sram: MemSpec,
    /// Per-cube HBM stack.
    pub hbm: MemSpec,
}

impl Memories {
    /// Each memory with its field name, in `Space` order (tcm, sram, hbm).
    pub fn named(&self) -> [(&'static str, &MemSpec); 3] {
        [("tcm", &self.tcm), ("sram", &self.sram), ("hbm", &self.hbm)]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemSpec {
    pub size_bytes: u64,
    pub bandwidth_gbps: f64,
    pub latency_ns: f64,
    /// Zero latency and unlimited bandwidth (size still applies).
    #[serde(default)]
    pub ideal: bool,
}

/// One entry per edge kind of the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkKinds {
    /// Router-to-router and endpoint-to-router links inside a cube.
    pub noc: LinkSpec,
    /// Die-to-die links between neighbouring cubes of one SIP.
    pub ucie: LinkSpec,
    /// Links between SIPs (one lane per inter-SIP cube and direction).
    pub inter_sip: LinkSpec,
    /// Host to SIP I/O.
    pub pcie: LinkSpec,
}

impl LinkKinds {
    /// Each edge kind with its field name, in link-class order (noc, ucie,
    /// inter_sip, pcie: `topology::EDGE_KINDS`).
    pub fn named(&self) -> [(&'static str, &LinkSpec); 4] {
        [
            ("noc", &self.noc),
            ("ucie", &self.ucie),
            ("inter_sip", &self.inter_sip),
            ("pcie", &self.pcie),
        ]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub bandwidth_gbps: f64,
    pub latency_ns: f64,
    /// Messages are cut into packets of at most this many bytes.
    pub packet_bytes: u64,
    /// Zero latency and unlimited bandwidth: matches closed forms and other simulators exactly.
    #[serde(default)]
    pub ideal: bool,
}

/// PE compute throughput.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeSpec {
    /// 16-bit lanes of the vector unit: f16 or bf16 elements it processes
    /// per tick (an f32 element takes two lanes).
    pub vector_lanes: u32,
    /// Multiply-accumulates the MAC array completes per tick (f16 or bf16
    /// operands; f32 operands take four).
    pub macs_per_tick: u64,
    /// Fixed cost of starting a kernel on a PE.
    pub launch_overhead_ns: f64,
}
