//! `kernbench topo`: build a system and describe it.

use super::args::{BudgetArg, SystemArg};
use super::paths::check_distinct_files;
use anyhow::Result;
use clap::Args;
use kernbench::machine::Machine;
use kernbench::topo_report::{self, DOT_FILES};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args)]
pub struct TopoArgs {
    #[command(flatten)]
    system: SystemArg,
    /// Write Graphviz views into DIR: sips.dot (SIP network) and cube.dot
    /// (the NoC of sip0.cube0). Render with `neato -Tsvg` (positions of
    /// SIPs and routers are pinned; neato places the endpoints). DIR is
    /// created if missing; an existing one must be empty or an earlier
    /// `topo --dot`'s.
    #[arg(long, value_name = "DIR")]
    dot: Option<PathBuf>,
    #[command(flatten)]
    budget: BudgetArg,
}

/// Knobs that shrink a build.
const BUILD_KNOBS: &str =
    "fewer SIPs (system.sips.count), fewer cubes (sip.cube_mesh), PEs or NoC routers";

pub fn run(a: TopoArgs) -> Result<()> {
    if let Some(dir) = &a.dot {
        let outputs = DOT_FILES.map(|f| dir.join(f));
        check_distinct_files("--dot", &outputs, &a.system)?;
    }
    let sys = a.system.load()?;
    kernbench::estimate::Estimate::build(&sys)
        .check(&a.budget.budget(), BUILD_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", sys.origin))?;
    // Claimed only now: a refused build leaves no directory behind.
    if let Some(dir) = &a.dot {
        kernbench::output::claim_dir("--dot", dir, "topo --dot").map_err(anyhow::Error::msg)?;
    }
    let t0 = Instant::now();
    let mut m = Machine::build(&sys)?;
    let build = t0.elapsed().as_secs_f64();
    print!("{}", topo_report::report(&mut m, &sys, build));
    if let Some(dir) = a.dot {
        write_dot(&m, &dir)?;
    }
    Ok(())
}

/// Writes the Graphviz views into `dir`, naming each file written.
fn write_dot(m: &Machine, dir: &Path) -> Result<()> {
    for (name, text) in DOT_FILES.iter().zip(topo_report::dot_views(m)) {
        let path = dir.join(name);
        kernbench::output::write_file(&path, text.as_bytes())
            .map_err(|e| anyhow::anyhow!("--dot: {e}"))?;
        println!("wrote       {}", path.display());
    }
    Ok(())
}
