//! `kernbench topo`: the text describing a built system — its layout,
//! totals, nodes by kind, directed links by edge kind, ECS entities,
//! diameter, build time and peak memory — and its Graphviz views.

use kernbench_runtime::machine::Machine;
use kernbench_runtime::report::{gib, peak_rss_bytes};
use kernbench_spec::spec::System;
use kernbench_spec::spec::types::SystemSpec;
use kernbench_spec::topology::{EDGE_KINDS, edge_kind};
use kernbench_systems::hierarchy::Pe;
use std::fmt::Write;

/// The files of [`dot_views`], in order.
pub const DOT_FILES: [&str; 2] = ["sips.dot", "cube.dot"];

/// Graphviz views of `m`: the SIP network and the NoC of sip0.cube0, named
/// by [`DOT_FILES`].
pub fn dot_views(m: &Machine) -> [String; 2] {
    [m.topology.sip_dot(), m.topology.cube_dot(0, 0)]
}

/// The whole report of `m`, built from `sys` in `build_secs` seconds; its
/// last line is the build time and this process's peak memory so far.
pub fn report(m: &mut Machine, sys: &System, build_secs: f64) -> String {
    let mut out = layout(m, sys);
    out.push_str(&links(m, &sys.spec));
    let world = &mut m.engine.world;
    // PEs are the hardware's only entities (SIPs and cubes are counted in
    // the totals above, from the topology).
    let entities = [("Pe", world.query::<&Pe>().iter(world).count())];
    out.push_str("\nECS entities\n");
    for (name, n) in entities {
        let _ = writeln!(out, "  {name:<16}{n:>12}");
    }
    let (hops, from, to) = m.topology.diameter();
    let _ = writeln!(
        out,
        "\ndiameter    {hops} hops (PE to PE, e.g. {} -> {})",
        m.topology.node(from),
        m.topology.node(to)
    );
    let _ = writeln!(
        out,
        "build       {build_secs:.3} s, peak memory {}",
        gib(peak_rss_bytes())
    );
    out
}

/// The system, its SIPs, what one SIP holds, the totals and nodes by kind.
fn layout(m: &Machine, sys: &System) -> String {
    let t = &m.topology;
    let s = &sys.spec;
    let mut out = format!("system      {}\n", sys.origin);
    let _ = writeln!(
        out,
        "sips        {} ({}, grid {}x{})",
        t.sips,
        t.kind.name(),
        t.grid.0,
        t.grid.1
    );
    let _ = writeln!(
        out,
        "per SIP     {} cubes ({}x{} mesh), {} PEs per cube ({} per corner x {} corners), {}x{} NoC routers per cube",
        t.cubes_per_sip(),
        t.cube_mesh.0,
        t.cube_mesh.1,
        t.pes_per_cube,
        s.cube.pe_layout.pe_per_corner,
        s.cube.pe_layout.corners,
        t.noc.0,
        t.noc.1
    );
    let cubes = t.sips as u64 * t.cubes_per_sip() as u64;
    let _ = writeln!(
        out,
        "totals      {} SIPs x {} cubes x {} PEs = {} PEs ({} cubes)",
        t.sips,
        t.cubes_per_sip(),
        t.pes_per_cube,
        cubes * t.pes_per_cube as u64,
        cubes
    );
    out.push_str("\nnodes by kind\n");
    for (kind, n) in t.node_counts() {
        let _ = writeln!(out, "  {:<16}{n:>12}", kind.name());
    }
    out
}

/// The table of directed links per edge kind with their parameters.
fn links(m: &Machine, s: &SystemSpec) -> String {
    let links = m.engine.links();
    let mut per_kind = [0u64; 4];
    for l in links.ids() {
        per_kind[edge_kind(links.class_index(l)) as usize] += 1;
    }
    let mut out = String::from("\ndirected links by edge kind\n");
    let _ = writeln!(
        out,
        "  {:<12}{:>12}{:>16}{:>14}{:>14}  ideal",
        "kind", "links", "bandwidth GB/s", "latency ns", "packet bytes"
    );
    for (i, name) in EDGE_KINDS.iter().enumerate() {
        let spec = [
            &s.links.noc,
            &s.links.ucie,
            &s.links.inter_sip,
            &s.links.pcie,
        ][i];
        let _ = writeln!(
            out,
            "  {name:<12}{:>12}{:>16}{:>14}{:>14}  {}",
            per_kind[i], spec.bandwidth_gbps, spec.latency_ns, spec.packet_bytes, spec.ideal
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kernbench topo` on the default system, up to its build line (whose
    /// time and memory vary).
    #[test]
    fn report_of_the_default_system_is_topos_text() {
        let sys = System::embedded_default();
        let mut m = Machine::build(&sys).unwrap();
        let text = report(&mut m, &sys, 0.25);
        let (body, build) = text
            .rsplit_once("build       0.250 s, peak memory ")
            .unwrap();
        assert!(build.ends_with('\n') && !build[..build.len() - 1].contains('\n'));
        assert_eq!(
            body,
            "system      <embedded default>
sips        4 (ring_1d, grid 4x1)
per SIP     16 cubes (4x4 mesh), 8 PEs per cube (2 per corner x 4 corners), 3x3 NoC routers per cube
totals      4 SIPs x 16 cubes x 8 PEs = 512 PEs (64 cubes)

nodes by kind
  host                       1
  sip_io                     4
  router                   576
  pe                       512
  m_cpu                     64
  sram                      64
  hbm                       64
  ucie_port                192
  inter_sip_port           128

directed links by edge kind
  kind               links  bandwidth GB/s    latency ns  packet bytes  ideal
  noc                 3592            1024             2          4096  false
  ucie                 192             128            10          4096  false
  inter_sip            128             100           300          4096  false
  pcie                   8              64           500           256  false

ECS entities
  Pe                       512

diameter    46 hops (PE to PE, e.g. sip0.cube0.pe0 -> sip2.cube15.pe4)
"
        );
        let [sips, cube] = dot_views(&m);
        assert!(sips.starts_with("graph") || sips.starts_with("digraph"));
        assert!(cube.contains("sip0.cube0"));
    }
}
