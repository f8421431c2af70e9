//! `kernbench list`: what can be named — presets, plans, ccl entries.

use super::args::load_ccl;
use anyhow::Result;
use clap::Args;
use kernbench::catalog;
use std::path::PathBuf;

#[derive(Args)]
pub struct ListArgs {
    /// What to list (default: all three).
    #[arg(value_enum, allow_hyphen_values = true)]
    what: Option<ListWhat>,
    /// Collective configuration YAML whose entries to list (default: the
    /// embedded configs/ccl.yaml).
    #[arg(long, value_name = "FILE")]
    ccl: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ListWhat {
    Presets,
    Plans,
    Algorithms,
}

pub fn run(a: ListArgs) -> Result<()> {
    let ccl = load_ccl(a.ccl.as_deref())?;
    let parts = [
        (ListWhat::Presets, catalog::presets()),
        (ListWhat::Plans, catalog::plans()),
        (ListWhat::Algorithms, catalog::algorithms(&ccl)),
    ];
    let shown: Vec<String> = parts
        .into_iter()
        .filter(|(w, _)| a.what.is_none_or(|x| x == *w))
        .map(|p| p.1)
        .collect();
    print!("{}", shown.join("\n"));
    Ok(())
}
