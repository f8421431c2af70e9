//! A validated system: the spec parsed with field paths and line numbers, plus
//! the cross-field rules serde alone cannot express (grid shape, limits).

use std::collections::HashMap;
use std::path::Path;

use super::error::SpecError;
use super::types::{LinkSpec, MemSpec, Mesh, PeLayout, PeSpec, SipsSpec, SystemSpec};

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

// ---------------------------------------------------------------------------
// Parse errors: serde_yaml + serde_path_to_error -> SpecError
// ---------------------------------------------------------------------------

/// Turns a serde error into a `SpecError` with the field path, line and a fix.
/// Parses YAML into `T`; errors name the file, the field path and the line.
/// Every config file (system spec, ccl.yaml, sweep plans) parses through here.
pub fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
) -> Result<T, SpecError> {
    let text = super::input::prepare_yaml(text, origin)?;
    let de = serde_yaml::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| parse_error(&e, &text, origin))
}

fn parse_error(
    e: &serde_path_to_error::Error<serde_yaml::Error>,
    text: &str,
    origin: &str,
) -> SpecError {
    let parent = known_path(e.path());
    let message = bare_message(e.inner(), &parent);
    let mut line = flow_start_line(&message).or(e.inner().location().map(|l| l.line()));
    if message.starts_with("missing field `") {
        // Point at the mapping that lacks the field; a missing top-level key has no line.
        line = if parent.is_empty() {
            None
        } else {
            line_of(text, &parent).or(line)
        };
    }
    let (path, problem, allowed) = explain(parent, &message);
    SpecError {
        file: origin.into(),
        path: if path.is_empty() {
            "(document)".into()
        } else {
            path
        },
        line,
        problem,
        allowed,
    }
}

/// (path, problem, allowed) for a serde message: reuses serde's "expected ..." as the fix.
fn explain(path: String, message: &str) -> (String, String, String) {
    if let Some(field) = backticked(message, "missing field `") {
        let place = if path.is_empty() {
            "at the top level".to_string()
        } else {
            format!("under `{path}`")
        };
        let allowed = format!("add `{field}:` {place} (configs/topology.yaml lists every field)");
        return (join(&path, field), message.to_string(), allowed);
    }
    if message.starts_with("duplicate field `") {
        let allowed = "each field at most once; delete the repeated key";
        return (path, message.to_string(), allowed.to_string());
    }
    if let Some((head, expected)) = message.split_once(", expected ") {
        let allowed = if let Some(v) = quoted_number(head) {
            format!(
                "write {v} without quotes or tags: {}",
                humanize_expected(expected)
            )
        } else if head.starts_with("unknown field") {
            format!(
                "field names here: {}",
                expected.trim_start_matches("one of ")
            )
        } else {
            humanize_expected(expected)
        };
        return (path, head.to_string(), allowed);
    }
    let allowed = "well-formed YAML: indent nested keys consistently with spaces (no tabs), \
                   close every { and [, one `key: value` per entry";
    (path, message.to_string(), allowed.to_string())
}

/// The value of serde's `invalid type: string "4"` when it spells a number
/// or a boolean: quoted (or tagged `!!str`) where the field takes the value.
fn quoted_number(head: &str) -> Option<&str> {
    let v = head
        .strip_prefix("invalid type: string \"")?
        .strip_suffix('"')?;
    (v.parse::<f64>().is_ok() || v == "true" || v == "false").then_some(v)
}

/// The error path as `a.b[2].c`, cut at the first segment serde could not name.
fn known_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = join(&out, key),
            Segment::Enum { variant } => out = join(&out, variant),
            Segment::Unknown => break,
        }
    }
    out
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// serde_yaml's message without its own `path: ` prefix and ` at line L column C`
/// suffix: `SpecError` shows both in its own format.
fn bare_message(e: &serde_yaml::Error, path: &str) -> String {
    let mut msg = e.to_string();
    if let Some(loc) = e.location() {
        let suffix = format!(" at line {} column {}", loc.line(), loc.column());
        if let Some(stripped) = msg.strip_suffix(&suffix) {
            msg = stripped.to_string();
        }
    }
    if let Some((head, rest)) = msg.split_once(": ") {
        let prefixes_path = head == path
            || path.starts_with(&format!("{head}."))
            || path.starts_with(&format!("{head}["));
        if prefixes_path {
            return rest.to_string();
        }
    }
    msg
}

/// For an unclosed `{`/`[`, libyaml reports the end of input; the line where the
/// flow collection opened ("while parsing a flow mapping at line N") is more useful.
fn flow_start_line(message: &str) -> Option<usize> {
    let after = &message[message.find("while parsing a flow")?..];
    let digits = &after[after.find("at line ")? + "at line ".len()..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// The name between `prefix` and the next backtick, e.g. the field of "missing field `x`".
fn backticked<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    Some(&rest[..rest.find('`')?])
}

/// serde's "expected ..." phrase in words a spec author understands.
fn humanize_expected(expected: &str) -> String {
    match expected {
        // The field's own range is checked after parsing; here the value is
        // not a number of the right kind at all.
        "u32" | "u64" => {
            "a whole number in digits (no sign, fraction or unit suffix such as K)".into()
        }
        "f64" => "a number such as 1.0".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "a list such as [0, 5]".into(),
        "a map" => "a mapping of names to entries such as { key: value }".into(),
        s if s.starts_with("struct ") => "a mapping of fields such as { key: value }".into(),
        s => s.into(),
    }
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// A validation failure before it is tied to a file and line.
#[derive(Debug)]
pub(super) struct Issue {
    path: String,
    problem: String,
    allowed: String,
}

impl Issue {
    fn at(self, file: &str, line: Option<usize>) -> SpecError {
        SpecError {
            file: file.into(),
            path: self.path,
            line,
            problem: self.problem,
            allowed: self.allowed,
        }
    }
}

pub(super) fn issue(
    path: impl Into<String>,
    problem: impl Into<String>,
    allowed: impl Into<String>,
) -> Issue {
    Issue {
        path: path.into(),
        problem: problem.into(),
        allowed: allowed.into(),
    }
}

type Check = Result<(), Issue>;

/// All rules of the spec; returns the SIP grid and the resolved SIP kinds.
/// Order: roughly document order.
fn validate(spec: &SystemSpec) -> Result<((u32, u32), super::kinds::SipKinds), Issue> {
    let sips = &spec.system.sips;
    check_count(sips.count)?;
    let grid = sip_grid(sips)?;
    check_tick(spec.system.tick_ns)?;
    check_mesh(
        "sip.cube_mesh",
        spec.sip.cube_mesh,
        "zero cubes",
        MAX_CUBE_MESH_SIDE,
    )?;
    check_inter_sip_cubes(sips, spec.sip.cube_mesh)?;
    check_pe_layout(spec.cube.pe_layout)?;
    check_mesh(
        "cube.noc_mesh",
        spec.cube.noc_mesh,
        "zero routers",
        MAX_NOC_SIDE,
    )?;
    for (name, mem) in spec.memory.named() {
        check_memory(&format!("memory.{name}"), mem)?;
    }
    for (name, link) in spec.links.named() {
        check_link(&format!("links.{name}"), link)?;
    }
    check_pe_at("pe", &spec.pe)?;
    let c = &spec.control;
    // Control messages are small: a credit or launch of gigabytes would be
    // millions of packets per chunk, which no estimate of a run foresees.
    count_in(
        "control.credit_bytes",
        c.credit_bytes,
        MAX_CONTROL_BYTES,
        "a credit would carry nothing",
    )?;
    count_in(
        "control.install_entry_bytes",
        c.install_entry_bytes,
        MAX_CONTROL_BYTES,
        "installs would be free",
    )?;
    count_in(
        "control.launch_bytes",
        c.launch_bytes,
        MAX_CONTROL_BYTES,
        "launches would be free",
    )?;
    check_total_pes(spec)?;
    let kinds = super::kinds::sip_kinds(spec)?;
    Ok((grid, kinds))
}

fn check_count(count: u32) -> Check {
    if count == 0 {
        return Err(issue(
            "system.sips.count",
            "count is 0: a system needs at least one SIP",
            format!("1 to {MAX_SIPS} SIPs"),
        ));
    }
    if count > MAX_SIPS {
        return Err(issue(
            "system.sips.count",
            format!("count is {count}, more than the limit of {MAX_SIPS} SIPs"),
            format!("1 to {MAX_SIPS} SIPs"),
        ));
    }
    Ok(())
}

/// The SIP grid: ring (count, 1), explicit w×h, or the square fallback k×k.
fn sip_grid(sips: &SipsSpec) -> Result<(u32, u32), Issue> {
    let count = sips.count;
    if !sips.topology.is_2d() {
        if let Some(key) = given_grid_key(sips) {
            return Err(issue(
                format!("system.sips.{key}"),
                format!(
                    "{key} is set, but w and h apply only to 2D topologies (torus_2d, mesh_2d_no_wrap), not ring_1d"
                ),
                "remove w and h for ring_1d, or set topology: torus_2d or mesh_2d_no_wrap",
            ));
        }
        return Ok((count, 1));
    }
    let (ew, eh) = squarest(count);
    let example = format!("e.g. w: {ew}, h: {eh}");
    match (sips.w, sips.h) {
        (Some(w), Some(h)) => {
            for (key, v) in [("w", w), ("h", h)] {
                if v == 0 {
                    return Err(issue(
                        format!("system.sips.{key}"),
                        format!("{key} is 0: a grid needs at least one row and column"),
                        format!("w >= 1 and h >= 1 with w*h = {count} ({example})"),
                    ));
                }
            }
            let product = u64::from(w) * u64::from(h);
            if product != u64::from(count) {
                return Err(issue(
                    "system.sips.w",
                    format!("the grid w*h = {w}*{h} = {product} does not match count = {count}"),
                    format!(
                        "w and h with w*h = {count} ({example}), or omit both for a square grid"
                    ),
                ));
            }
            Ok((w, h))
        }
        (Some(_), None) | (None, Some(_)) => {
            let (given, missing) = if sips.w.is_some() {
                ("w", "h")
            } else {
                ("h", "w")
            };
            Err(issue(
                format!("system.sips.{given}"),
                format!("{given} is set but {missing} is not"),
                format!(
                    "give both w and h with w*h = {count} ({example}), or omit both for a square grid"
                ),
            ))
        }
        (None, None) => {
            let k = count.isqrt();
            if k * k == count {
                return Ok((k, k));
            }
            Err(issue(
                "system.sips.count",
                format!(
                    "{count} SIPs is not a square number, so the square fallback cannot apply (w and h are omitted)"
                ),
                format!(
                    "set system.sips.w and system.sips.h with w*h = {count} ({example}), or a square count such as {} or {}",
                    k * k,
                    (k + 1) * (k + 1)
                ),
            ))
        }
    }
}

/// The first of w/h present in the spec (for error paths).
fn given_grid_key(sips: &SipsSpec) -> Option<&'static str> {
    if sips.w.is_some() {
        Some("w")
    } else if sips.h.is_some() {
        Some("h")
    } else {
        None
    }
}

/// The most square factorization w*h = n with w >= h (for fix suggestions).
fn squarest(n: u32) -> (u32, u32) {
    let h = (1..=n.isqrt().max(1))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1);
    (n / h, h)
}

fn check_tick(tick_ns: f64) -> Check {
    positive("system.tick_ns", tick_ns, "nanoseconds, e.g. 1.0")?;
    in_range(
        "system.tick_ns",
        tick_ns,
        0.001,
        MAX_TICK_NS,
        "nanoseconds, e.g. 1.0",
    )?;
    let ps = tick_ns * 1000.0;
    if (ps - ps.round()).abs() > 1e-9 || ps.round() < 1.0 {
        return Err(issue(
            "system.tick_ns",
            format!("tick_ns is {tick_ns}, not a whole number of picoseconds"),
            "a multiple of 0.001 ns, e.g. 0.5 or 1.0",
        ));
    }
    Ok(())
}

fn check_mesh(path: &str, mesh: Mesh, zero_means: &str, max: u32) -> Check {
    for (key, v) in [("w", mesh.w), ("h", mesh.h)] {
        if v == 0 {
            return Err(issue(
                format!("{path}.{key}"),
                format!("{key} is 0 ({zero_means})"),
                format!("a whole number from 1 to {max}"),
            ));
        }
        if v > max {
            return Err(issue(
                format!("{path}.{key}"),
                format!("{key} is {v}, more than the limit of {max}"),
                format!("a whole number from 1 to {max}"),
            ));
        }
    }
    Ok(())
}

/// A finite number in `lo..=hi` (the unit is said in `allowed`).
fn in_range(path: &str, value: f64, lo: f64, hi: f64, unit: &str) -> Check {
    if !(value.is_finite() && value >= lo && value <= hi) {
        let name = field_name(path);
        return Err(issue(
            path,
            format!("{name} is {value}"),
            format!("a number from {lo} to {hi} ({unit})"),
        ));
    }
    Ok(())
}

/// Largest control message (credit, launch, one install entry), bytes.
pub const MAX_CONTROL_BYTES: u64 = 1 << 20;

/// A whole number in `1..=hi`.
fn count_in(path: &str, value: u64, hi: u64, zero_means: &str) -> Check {
    at_least_one(path, value, zero_means)?;
    if value > hi {
        let name = field_name(path);
        return Err(issue(
            path,
            format!("{name} is {value}, more than the limit of {hi}"),
            format!("a whole number from 1 to {hi}"),
        ));
    }
    Ok(())
}

fn check_inter_sip_cubes(sips: &SipsSpec, mesh: Mesh) -> Check {
    let Some(ids) = &sips.inter_sip_cubes else {
        return Ok(());
    };
    let path = "system.sips.inter_sip_cubes";
    let cubes = u64::from(mesh.w) * u64::from(mesh.h);
    let range = format!("cube ids 0 to {}", cubes - 1);
    if ids.is_empty() {
        return Err(issue(
            path,
            "the list is empty, so no cube would connect to other SIPs",
            format!("{range}, at least one; or omit inter_sip_cubes to give every cube a lane"),
        ));
    }
    let mut seen: HashMap<u32, usize> = HashMap::new();
    for (i, &id) in ids.iter().enumerate() {
        let item = format!("{path}[{i}]");
        if u64::from(id) >= cubes {
            return Err(issue(
                item,
                format!(
                    "cube {id} does not exist: the cube mesh is {}x{} = {cubes} cubes",
                    mesh.w, mesh.h
                ),
                range,
            ));
        }
        if let Some(first) = seen.insert(id, i) {
            return Err(issue(
                item,
                format!("cube {id} is listed twice (also at index {first})"),
                format!("each cube id at most once ({range})"),
            ));
        }
    }
    Ok(())
}

fn check_pe_layout(layout: PeLayout) -> Check {
    count_in(
        "cube.pe_layout.pe_per_corner",
        u64::from(layout.pe_per_corner),
        u64::from(MAX_PE_PER_CORNER),
        "a cube would have no PEs",
    )?;
    if !(1..=4).contains(&layout.corners) {
        return Err(issue(
            "cube.pe_layout.corners",
            format!("corners is {}, but a cube has 4 corners", layout.corners),
            "1 to 4 (filled in the order NW, NE, SW, SE)",
        ));
    }
    Ok(())
}

fn check_memory(path: &str, mem: &MemSpec) -> Check {
    count_in(
        &format!("{path}.size_bytes"),
        mem.size_bytes,
        MAX_MEMORY_BYTES,
        "the memory could hold nothing",
    )?;
    check_bandwidth(&format!("{path}.bandwidth_gbps"), mem.bandwidth_gbps)?;
    check_duration(&format!("{path}.latency_ns"), mem.latency_ns)
}

pub(super) fn check_bandwidth(path: &str, gbps: f64) -> Check {
    positive(path, gbps, "GB/s; set ideal: true for unlimited bandwidth")?;
    in_range(
        path,
        gbps,
        MIN_BANDWIDTH_GBPS,
        MAX_BANDWIDTH_GBPS,
        "GB/s; set ideal: true for unlimited bandwidth",
    )
}

pub(super) fn check_duration(path: &str, ns: f64) -> Check {
    non_negative(path, ns)?;
    in_range(path, ns, 0.0, MAX_DURATION_NS, "nanoseconds")
}

fn check_link(path: &str, link: &LinkSpec) -> Check {
    check_bandwidth(&format!("{path}.bandwidth_gbps"), link.bandwidth_gbps)?;
    check_duration(&format!("{path}.latency_ns"), link.latency_ns)?;
    count_in(
        &format!("{path}.packet_bytes"),
        link.packet_bytes,
        MAX_PACKET_BYTES,
        "no data could be sent",
    )
}

/// The rules of a PE section at `path` (`pe`, or a kind's `sip_kinds.K.pe`).
pub(super) fn check_pe_at(path: &str, pe: &PeSpec) -> Check {
    at_least_one(
        &format!("{path}.vector_lanes"),
        u64::from(pe.vector_lanes),
        "the vector unit could do no work",
    )?;
    at_least_one(
        &format!("{path}.macs_per_tick"),
        pe.macs_per_tick,
        "the MAC array could do no work",
    )?;
    check_duration(&format!("{path}.launch_overhead_ns"), pe.launch_overhead_ns)
}

/// Runs after every per-field rule, so the products below cannot be zero.
fn check_total_pes(spec: &SystemSpec) -> Check {
    let count = u64::from(spec.system.sips.count);
    let cubes = u64::from(spec.sip.cube_mesh.w) * u64::from(spec.sip.cube_mesh.h);
    let pes = u64::from(spec.cube.pe_layout.pe_per_corner) * u64::from(spec.cube.pe_layout.corners);
    let per_sip = cubes.saturating_mul(pes);
    let total = count.saturating_mul(per_sip);
    if total <= MAX_TOTAL_PES {
        return Ok(());
    }
    let fit = MAX_TOTAL_PES / per_sip.max(1);
    let fewer_sips = if fit >= 1 {
        format!("at most {fit} SIPs with this SIP")
    } else {
        "a smaller SIP".to_string()
    };
    Err(issue(
        "system.sips.count",
        format!(
            "{count} SIPs x {cubes} cubes x {pes} PEs = {total} PEs, more than the simulator limit of {MAX_TOTAL_PES} (2^26)"
        ),
        format!(
            "at most {MAX_TOTAL_PES} PEs in total: {fewer_sips}, or fewer cubes or PEs per SIP"
        ),
    ))
}

fn field_name(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

fn at_least_one(path: &str, value: u64, zero_means: &str) -> Check {
    if value == 0 {
        let name = field_name(path);
        return Err(issue(
            path,
            format!("{name} is 0 ({zero_means})"),
            "a whole number >= 1",
        ));
    }
    Ok(())
}

fn positive(path: &str, value: f64, unit: &str) -> Check {
    if !(value.is_finite() && value > 0.0) {
        let name = field_name(path);
        return Err(issue(
            path,
            format!("{name} is {value}"),
            format!("a finite number > 0 ({unit})"),
        ));
    }
    Ok(())
}

fn non_negative(path: &str, value: f64) -> Check {
    if !(value.is_finite() && value >= 0.0) {
        let name = field_name(path);
        return Err(issue(
            path,
            format!("{name} is {value}"),
            "a finite number >= 0 (nanoseconds)",
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Line lookup
// ---------------------------------------------------------------------------

/// 1-based line of the key at a dotted `path` (`links.noc.latency_ns`,
/// `system.sips.inter_sip_cubes[2]`) in `text`, found by indentation.
///
/// serde only reports lines for parse errors; validation errors need this to
/// point the user at the offending key. A key inside a one-line flow mapping
/// (`cube_mesh: { w: 4, h: 4 }`) gives the line of that mapping; a list index
/// gives the line of that `- ` item, or of the key for a flow list.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    let (keys, index) = split_path(path);
    if keys.is_empty() {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut stack: Vec<(usize, &str)> = Vec::new();
    for (n, raw) in lines.iter().enumerate() {
        let Some((indent, key, value)) = key_line(raw) else {
            continue;
        };
        while stack.last().is_some_and(|&(i, _)| i >= indent) {
            stack.pop();
        }
        stack.push((indent, key));
        let here: Vec<&str> = stack.iter().map(|&(_, k)| k).collect();
        if here == keys {
            let item = index.and_then(|i| block_item_line(&lines[n + 1..], indent, i));
            return Some(item.map_or(n + 1, |k| n + 2 + k));
        }
        if keys.starts_with(&here) && flow_contains(value, &keys[here.len()..]) {
            return Some(n + 1);
        }
    }
    None
}

/// `a.b[2]` -> (["a", "b"], Some(2)); only the last index matters for lines.
fn split_path(path: &str) -> (Vec<&str>, Option<usize>) {
    let mut index = None;
    let keys = path
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|seg| match seg.split_once('[') {
            Some((key, rest)) => {
                index = rest.trim_end_matches(']').parse().ok();
                key
            }
            None => {
                index = None;
                seg
            }
        })
        .collect();
    (keys, index)
}

/// (indent, key, value) of a `key: value` line; None for blanks, comments, list items.
fn key_line(raw: &str) -> Option<(usize, &str, &str)> {
    let body = raw.trim_start_matches(' ');
    let indent = raw.len() - body.len();
    if body.is_empty() || body.starts_with('#') || body.starts_with('-') {
        return None;
    }
    let colon = key_colon(body)?;
    let key = body[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
    Some((indent, key, body[colon + 1..].trim_start()))
}

/// Byte index of the `:` that ends a YAML key (followed by a space or the line end).
fn key_colon(s: &str) -> Option<usize> {
    s.char_indices()
        .find(|&(i, c)| c == ':' && matches!(s.as_bytes().get(i + 1), None | Some(b' ' | b'\t')))
        .map(|(i, _)| i)
}

/// Line offset (0-based, within `rest`) of the `index`-th `- ` item of a block list.
fn block_item_line(rest: &[&str], key_indent: usize, index: usize) -> Option<usize> {
    let mut seen = 0;
    for (k, raw) in rest.iter().enumerate() {
        let body = raw.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = raw.len() - body.len();
        let is_item = body == "-" || body.starts_with("- ");
        if !is_item || indent < key_indent {
            return None;
        }
        if seen == index {
            return Some(k);
        }
        seen += 1;
    }
    None
}

/// Whether the flow mapping `value` (`{ a: 1, b: { c: 2 } }`) holds the key chain `keys`.
fn flow_contains(value: &str, keys: &[&str]) -> bool {
    let Some((first, rest)) = keys.split_first() else {
        return false;
    };
    if !value.starts_with('{') {
        return false;
    }
    flow_entries(value)
        .into_iter()
        .any(|(k, v)| k == *first && (rest.is_empty() || flow_contains(v, rest)))
}

/// Top-level `key: value` entries of a flow mapping starting at `{`; tolerates a missing `}`.
fn flow_entries(flow: &str) -> Vec<(&str, &str)> {
    let mut entries = Vec::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut start = 1;
    for (i, c) in flow.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    entries.extend(flow_entry(&flow[start..i]));
                    return entries;
                }
            }
            (None, ',') if depth == 1 => {
                entries.extend(flow_entry(&flow[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    entries.extend(flow_entry(&flow[start.min(flow.len())..]));
    entries
}

/// `key: value` of one flow-mapping entry.
fn flow_entry(seg: &str) -> Option<(&str, &str)> {
    let colon = key_colon(seg)?;
    let key = seg[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
    Some((key, seg[colon + 1..].trim()))
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
    fn spec_line_of_block_and_flow_keys() {
        let t = DEFAULT_SYSTEM_YAML;
        assert_eq!(line_of(t, "system"), Some(3));
        assert_eq!(line_of(t, "system.sips.count"), Some(5));
        assert_eq!(line_of(t, "system.tick_ns"), Some(10));
        assert_eq!(line_of(t, "sip.cube_mesh"), Some(12));
        assert_eq!(line_of(t, "sip.cube_mesh.h"), Some(12));
        assert_eq!(line_of(t, "cube.pe_layout.corners"), Some(14));
        assert_eq!(line_of(t, "memory.hbm.latency_ns"), Some(19));
        assert_eq!(line_of(t, "links.pcie.packet_bytes"), Some(24));
        assert_eq!(line_of(t, "pe.launch_overhead_ns"), Some(28));
        // commented-out keys, absent keys and keys absent from a flow map are not found
        assert_eq!(line_of(t, "system.sips.w"), None);
        assert_eq!(line_of(t, "sip.cube_mesh.d"), None);
        assert_eq!(line_of(t, "links.noc.ideal"), None);
        assert_eq!(line_of(t, ""), None);
    }

    #[test]
    fn spec_line_of_lists_and_nested_flow() {
        let t = "a:\n  b: [1, 2]\n  c:\n    - 1\n    # note\n    - 2\n  d: { e: { f: 1 }, g: \"x,y\", h: 2 }\n";
        assert_eq!(line_of(t, "a.b[1]"), Some(2));
        assert_eq!(line_of(t, "a.c[0]"), Some(4));
        assert_eq!(line_of(t, "a.c[1]"), Some(6));
        assert_eq!(line_of(t, "a.c[9]"), Some(3));
        assert_eq!(line_of(t, "a.d.e.f"), Some(7));
        assert_eq!(line_of(t, "a.d.h"), Some(7));
        assert_eq!(line_of(t, "a.d.e.z"), None);
        assert_eq!(line_of("x: { y: 1", "x.y"), Some(1));
    }

    #[test]
    fn spec_squarest_prefers_square_with_w_ge_h() {
        assert_eq!(squarest(6), (3, 2));
        assert_eq!(squarest(12), (4, 3));
        assert_eq!(squarest(7), (7, 1));
        assert_eq!(squarest(16), (4, 4));
        assert_eq!(squarest(1), (1, 1));
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
