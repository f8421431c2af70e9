//! What is built in and can be named on the command line: system presets,
//! sweep plans, and the ccl config's algorithm entries with the collectives
//! and SIP topologies each supports (the text of `kernbench list`).

use crate::sweep::plan::{PLANS, TP_PLAN, TRAIN_PLAN};
use kernbench_ccl::{CclConfig, algorithms};
use kernbench_spec::spec::System;
use kernbench_spec::spec::presets::{PRESETS, preset};
use std::fmt::Write as _;

/// A system's shape in one line: SIPs, network and grid, cubes and PEs.
pub fn shape(sys: &System) -> String {
    let s = &sys.spec;
    format!(
        "{} SIPs {} {}x{}, {} cubes x {} PEs per SIP",
        s.system.sips.count,
        s.system.sips.topology.name(),
        sys.sip_grid.0,
        sys.sip_grid.1,
        sys.cubes_per_sip(),
        sys.pes_per_cube(),
    )
}

/// The presets, one line each: name and the system in numbers.
pub fn presets() -> String {
    let mut out = String::from("presets (--preset NAME; configs/topologies/):\n");
    for (name, _) in PRESETS {
        let line = match preset(name) {
            Ok(sys) => format!("{}, {} PEs", shape(&sys), sys.total_pes()),
            Err(e) => format!("does not load: {e}"),
        };
        let _ = writeln!(out, "  {name:<16} {line}");
    }
    out
}

/// The built-in plans, one line each: name and description.
pub fn plans() -> String {
    let mut out = String::from("plans (sweep --plan NAME; configs/sweeps/):\n");
    for (name, yaml) in PLANS.iter().chain([&TP_PLAN, &TRAIN_PLAN]) {
        let head: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap_or_default();
        let description = head
            .get("description")
            .and_then(|d| d.as_str())
            .unwrap_or("");
        let _ = writeln!(out, "  {name:<16} {description}");
    }
    out
}

/// The entries of `ccl` (origin named), each with its algorithm, the
/// collectives and topologies the algorithm supports, and its idea; then
/// `auto`, which is no algorithm but the autotuner's choice.
pub fn algorithms(ccl: &CclConfig) -> String {
    let w = ccl
        .entries
        .iter()
        .map(|e| e.name.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut out = format!(
        "algorithms (--algorithm NAME: entries of {}):\n  {:<w$} {:<12} {:<62} {}\n",
        ccl.origin, "entry", "algorithm", "collectives", "topologies"
    );
    for e in &ccl.entries {
        let Ok(a) = algorithms::find(&e.algorithm) else {
            let _ = writeln!(
                out,
                "  {:<w$} {:<12} (not a registered algorithm)",
                e.name, e.algorithm
            );
            continue;
        };
        let collectives: Vec<&str> = a.collectives().iter().map(|c| c.name()).collect();
        let topologies: Vec<&str> = a.topologies().iter().map(|t| t.name()).collect();
        // An entry naming its algorithm by an alias says what it is registered as.
        let registered_as = if a.name() == e.algorithm {
            String::new()
        } else {
            format!("{} (alias {}): ", a.name(), e.algorithm)
        };
        let _ = writeln!(
            out,
            "  {:<w$} {:<12} {:<62} {}\n  {:<w$} {registered_as}{}",
            e.name,
            e.algorithm,
            collectives.join(", "),
            topologies.join(", "),
            "",
            a.summary()
        );
    }
    let _ = writeln!(
        out,
        "  {:<w$} chosen per size among the ccl config's autotune candidates (kernbench autotune)",
        kernbench_ccl::config::AUTO
    );
    out
}
