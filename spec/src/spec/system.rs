//! A validated system: the spec parsed with field paths and line numbers, plus
//! the cross-field rules serde alone cannot express (grid shape, limits).

use std::path::Path;

use super::error::SpecError;
use super::locate::line_of;
use super::rules::validate;
use super::types::SystemSpec;
use super::yaml_error::parse_yaml;

/// The default spec, compiled in so the binary runs without any config file.
pub const DEFAULT_SYSTEM_YAML: &str = include_str!("../../../configs/topology.yaml");

/// Origin reported for the compiled-in default.
pub const EMBEDDED_ORIGIN: &str = "<embedded default>";

/// Most SIPs a system may have (2^20): keeps SIP ids and grids well inside u32.
pub const MAX_SIPS: u32 = 1 << 20;

/// Most PEs a system may have (2^26): bounds the simulator's memory use.
pub const MAX_TOTAL_PES: u64 = 1 << 26;

/// Longest latency or launch overhead, ns (1000 s): larger values would
/// saturate the 64-bit tick counter or hide every other cost.
pub const MAX_DURATION_NS: f64 = 1e12;

/// Bandwidth range, GB/s: 1 byte/s to 1 EB/s, so a link's bytes-per-tick
/// fraction stays exact in 64 bits.
pub const MIN_BANDWIDTH_GBPS: f64 = 1e-9;
pub const MAX_BANDWIDTH_GBPS: f64 = 1e9;

/// Longest tick, ns (1 ms).
pub const MAX_TICK_NS: f64 = 1e6;

/// Largest packet, bytes (2^32 − 1): packets travel with 32-bit sizes.
pub const MAX_PACKET_BYTES: u64 = u32::MAX as u64;

/// Largest memory instance, bytes (1 PiB).
pub const MAX_MEMORY_BYTES: u64 = 1 << 50;

/// Largest cube mesh side (64 × 64 cubes per SIP) and NoC side (32 × 32
/// routers per cube).
pub const MAX_CUBE_MESH_SIDE: u32 = 64;
pub const MAX_NOC_SIDE: u32 = 32;

/// Most PEs per corner of a cube.
pub const MAX_PE_PER_CORNER: u32 = 256;

/// A system spec that passed validation, with its derived SIP grid.
#[derive(Debug, Clone, PartialEq)]
pub struct System {
    pub spec: SystemSpec,
    /// SIP grid (w, h); ring_1d is (count, 1)
    pub sip_grid: (u32, u32),
    /// where it came from: a path or "<embedded default>"
    pub origin: String,
    /// The SIP kinds resolved from `sip_kinds:` (only the base kind when
    /// there are none).
    pub kinds: super::kinds::SipKinds,
    /// Logical SIPs each simulated SIP stands for along x and y: (1, 1)
    /// unless this is the fold of a larger ring or torus ([`System::folded`]).
    pub fold: (u32, u32),
}

impl System {
    /// The compiled-in default (`configs/topology.yaml`); a test guarantees it is valid.
    pub fn embedded_default() -> System {
        Self::from_yaml(DEFAULT_SYSTEM_YAML, EMBEDDED_ORIGIN)
            .unwrap_or_else(|e| panic!("embedded default spec is invalid: {e}"))
    }

    /// Reads and validates a spec file; an unreadable file is a `SpecError` on path `(file)`.
    pub fn from_file(path: &Path) -> Result<System, SpecError> {
        let text = super::input::read_config(path, "system spec")?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    /// Parses and validates YAML text; errors carry `origin` as the file name and the line.
    pub fn from_yaml(text: &str, origin: &str) -> Result<System, SpecError> {
        let spec: SystemSpec = parse_yaml(text, origin)?;
        let (sip_grid, kinds) = validate(&spec).map_err(|i| {
            let line = line_of(text, &i.path);
            i.at(origin, line)
        })?;
        Ok(System {
            spec,
            sip_grid,
            origin: origin.into(),
            kinds,
            fold: (1, 1),
        })
    }

    /// Validates an already-built spec (no text, so errors have no line).
    pub fn from_spec(spec: SystemSpec, origin: &str) -> Result<System, SpecError> {
        let (sip_grid, kinds) = validate(&spec).map_err(|i| i.at(origin, None))?;
        Ok(System {
            spec,
            sip_grid,
            origin: origin.into(),
            kinds,
            fold: (1, 1),
        })
    }

    /// The spec as YAML; `from_yaml` of the result gives back the same spec.
    pub fn to_yaml(&self) -> String {
        // Plain structs, bools, numbers and unit enum variants always serialize.
        serde_yaml::to_string(&self.spec).expect("spec types always serialize to YAML")
    }

    /// This system with `n` SIPs on the same kind of network: a 2-D grid
    /// as square as `n` allows (w ≥ h, w · h = n), a ring as it is; SIPs
    /// below `n` keep their kinds, added ones are of the base kind.
    pub fn with_sips(&self, n: u32) -> Result<System, SpecError> {
        let mut spec = self.spec.clone();
        let sips = &mut spec.system.sips;
        sips.count = n;
        if let Some(kinds) = &mut sips.kinds {
            super::kinds::keep_sips_below(kinds, n);
        }
        (sips.w, sips.h) = match sips.topology {
            crate::spec::SipTopology::Ring1d => (None, None),
            _ => {
                let h = (1..=n)
                    .filter(|h| h * h <= n && n.is_multiple_of(*h))
                    .max()
                    .unwrap_or(1);
                (Some(n / h.max(1)), Some(h))
            }
        };
        System::from_spec(spec, &self.origin)
    }

    /// The smallest ring or torus that repeats this one: each dimension
    /// of `n` SIPs cut to its least divisor `d ≥ 3` (a ring of 3 still
    /// tells its east neighbour from its west one), the rest recorded in
    /// [`System::fold`]. Err says why this system does not fold: a mesh has
    /// edges and SIP kinds differ, so neither repeats under a shift; a grid
    /// whose sides have no such divisor is its own fold.
    pub fn folded(&self) -> Result<System, String> {
        use crate::spec::SipTopology;
        let sips = &self.spec.system.sips;
        if sips.topology == SipTopology::Mesh2dNoWrap {
            return Err(
                "a mesh_2d_no_wrap has edges, so its SIPs do not all see the same machine; allowed: a ring_1d or torus_2d".into(),
            );
        }
        if !self.spec.sip_kinds.is_empty() || sips.kinds.is_some() {
            return Err(
                "the SIPs are of several kinds (sip_kinds), so a shift does not map the machine onto itself; allowed: SIPs of one kind".into(),
            );
        }
        let least = |n: u32| (3..n).find(|d| n.is_multiple_of(*d)).unwrap_or(n);
        let (w, h) = self.sip_grid;
        let (dw, dh) = (least(w), least(h));
        if (dw, dh) == (w, h) {
            return Err(format!(
                "a {w}x{h} grid has no smaller repeat (each side of 3 or more SIPs folds onto its least divisor of 3 or more); allowed: a side with such a divisor, e.g. 8 or 64"
            ));
        }
        let mut spec = self.spec.clone();
        spec.system.sips.count = dw * dh;
        if sips.topology == SipTopology::Torus2d {
            (spec.system.sips.w, spec.system.sips.h) = (Some(dw), Some(dh));
        }
        let mut folded = System::from_spec(spec, &self.origin).map_err(|e| e.to_string())?;
        folded.fold = (self.fold.0 * w / dw, self.fold.1 * h / dh);
        Ok(folded)
    }

    /// SIPs of the machine this system stands for: its own, times the fold.
    pub fn logical_sips(&self) -> u32 {
        self.n_sips() * self.fold.0 * self.fold.1
    }

    pub fn n_sips(&self) -> u32 {
        self.spec.system.sips.count
    }

    pub fn cubes_per_sip(&self) -> u32 {
        let m = self.spec.sip.cube_mesh;
        m.w * m.h
    }

    pub fn pes_per_cube(&self) -> u32 {
        self.spec.cube.pe_layout.pes()
    }

    pub fn total_pes(&self) -> u64 {
        u64::from(self.n_sips()) * u64::from(self.cubes_per_sip()) * u64::from(self.pes_per_cube())
    }

    /// The cubes with inter-SIP lanes, sorted (all cubes when the field is omitted).
    pub fn inter_sip_cubes(&self) -> Vec<u32> {
        match &self.spec.system.sips.inter_sip_cubes {
            Some(ids) => {
                let mut ids = ids.clone();
                ids.sort_unstable();
                ids
            }
            None => (0..self.cubes_per_sip()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_with(from: &str, to: &str) -> String {
        assert!(
            DEFAULT_SYSTEM_YAML.contains(from),
            "default spec lacks {from:?}"
        );
        DEFAULT_SYSTEM_YAML.replacen(from, to, 1)
    }

    use crate::spec::types::SipTopology;

    #[test]
    fn spec_embedded_default_is_valid() {
        let s = System::embedded_default();
        assert_eq!(s.origin, EMBEDDED_ORIGIN);
        assert_eq!((s.n_sips(), s.sip_grid), (4, (4, 1)));
        assert_eq!(s.spec.system.sips.topology, SipTopology::Ring1d);
        assert_eq!(
            (s.cubes_per_sip(), s.pes_per_cube(), s.total_pes()),
            (16, 8, 4 * 16 * 8)
        );
        assert_eq!(s.inter_sip_cubes(), (0..16).collect::<Vec<u32>>());
    }

    #[test]
    fn spec_from_spec_reports_no_line() {
        let mut spec = System::embedded_default().spec;
        spec.links.noc.bandwidth_gbps = f64::NAN;
        let e = System::from_spec(spec, "built").unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.path.as_str(), e.line),
            ("built", "links.noc.bandwidth_gbps", None)
        );
        assert!(
            e.to_string()
                .starts_with("built: links.noc.bandwidth_gbps: "),
            "{e}"
        );
    }

    #[test]
    fn spec_total_pe_limit_is_inclusive() {
        // 2^19 SIPs x 16 cubes x 8 PEs = 2^26 exactly: allowed; one more SIP is not.
        let ok = default_with("count: 4", "count: 524288");
        assert_eq!(
            System::from_yaml(&ok, "t").unwrap().total_pes(),
            MAX_TOTAL_PES
        );
        let e = System::from_yaml(&default_with("count: 4", "count: 524289"), "t").unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("system.sips.count", Some(5)));
        assert!(e.allowed.contains("at most 524288 SIPs"), "{e}");
    }

    #[test]
    fn spec_count_limits() {
        let e = System::from_yaml(&default_with("count: 4", "count: 0"), "t").unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("system.sips.count", Some(5)));
        let e = System::from_yaml(&default_with("count: 4", "count: 1048577"), "t").unwrap_err();
        assert!(e.problem.contains("1048576"), "{e}");
    }

    #[test]
    fn spec_fractional_picosecond_tick_rejected() {
        let e =
            System::from_yaml(&default_with("tick_ns: 1.0", "tick_ns: 1.0005"), "t").unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("system.tick_ns", Some(10)));
        assert!(e.problem.contains("picoseconds"), "{e}");
        let e =
            System::from_yaml(&default_with("tick_ns: 1.0", "tick_ns: 0.0005"), "t").unwrap_err();
        assert!(e.allowed.starts_with("a number from 0.001 to"), "{e}");
        assert!(System::from_yaml(&default_with("tick_ns: 1.0", "tick_ns: 0.25"), "t").is_ok());
    }

    #[test]
    fn spec_missing_field_points_at_parent() {
        let e = System::from_yaml(&default_with("  macs_per_tick: 1024\n", ""), "t").unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("pe.macs_per_tick", Some(25)));
        assert!(e.allowed.contains("add `macs_per_tick:`"), "{e}");
        let e = System::from_yaml("", "t").unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("system", None));
    }

    #[test]
    fn spec_nan_values_rejected() {
        let e = System::from_yaml(&default_with("latency_ns: 5.0", "latency_ns: .nan"), "t")
            .unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.line),
            ("memory.sram.latency_ns", Some(18))
        );
    }

    proptest::proptest! {
        #[test]
        fn spec_arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let _ = System::from_yaml(&text, "fuzz");
            let _ = line_of(&text, "a.b[1]");
        }

        #[test]
        fn spec_arbitrary_numbers_never_panic(n in proptest::num::i64::ANY, f in proptest::num::f64::ANY, which in 0usize..8) {
            let targets = ["count: 4", "w: 4", "pe_per_corner: 2", "corners: 4", "packet_bytes: 256", "latency_ns: 300.0", "bandwidth_gbps: 64.0", "tick_ns: 1.0"];
            let key = targets[which].split(':').next().unwrap();
            for value in [n.to_string(), format!("{f:?}")] {
                let text = default_with(targets[which], &format!("{key}: {value}"));
                if let Ok(s) = System::from_yaml(&text, "fuzz") {
                    proptest::prop_assert!(s.total_pes() <= MAX_TOTAL_PES);
                    proptest::prop_assert_eq!(System::from_yaml(&s.to_yaml(), "again").map(|t| t.spec), Ok(s.spec));
                }
            }
        }
    }
}
