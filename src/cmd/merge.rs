//! `kernbench merge`: result directories of one plan into one result set.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct MergeArgs {
    /// Result directories of the same plan (e.g. its shards).
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Where to write the merged result set.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn run(a: MergeArgs) -> Result<()> {
    let m = kernbench::sweep::merge::merge(&a.dirs, &a.out).map_err(anyhow::Error::msg)?;
    for w in &m.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", kernbench::sweep::results::summary(&m.rows));
    println!(
        "\nmerged {} point files from {} directories into {} ({} points)",
        m.files,
        a.dirs.len(),
        a.out.display(),
        m.rows.len()
    );
    super::exit_if_failed(&m.rows);
    Ok(())
}
