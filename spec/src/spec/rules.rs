//! The rules of a system spec serde alone cannot express: ranges, the SIP
//! grid's shape, limits on counts and sizes, cross-field checks.

use super::error::SpecError;
use super::system::*;
use super::types::{LinkSpec, MemSpec, Mesh, PeLayout, PeSpec, SipsSpec, SystemSpec};
use std::collections::HashMap;

/// A validation failure before it is tied to a file and line.
#[derive(Debug)]
pub(super) struct Issue {
    pub(super) path: String,
    problem: String,
    allowed: String,
}

impl Issue {
    pub(super) fn at(self, file: &str, line: Option<usize>) -> SpecError {
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
pub(super) fn validate(spec: &SystemSpec) -> Result<((u32, u32), super::kinds::SipKinds), Issue> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_squarest_prefers_square_with_w_ge_h() {
        assert_eq!(squarest(6), (3, 2));
        assert_eq!(squarest(12), (4, 3));
        assert_eq!(squarest(7), (7, 1));
        assert_eq!(squarest(16), (4, 4));
        assert_eq!(squarest(1), (1, 1));
    }
}
