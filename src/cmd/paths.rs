//! Checks of the paths a command writes, made before anything runs, and
//! the default result directory of a sweep.

use super::args::SystemArg;
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

/// Refuses an output file that cannot be written before anything runs:
/// a directory, or a path whose directory does not exist.
pub fn check_output_file(flag: &str, path: &Path) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if path.is_dir() {
        bail!(
            "{flag} {}: is a directory; allowed: a file path, e.g. {}",
            path.display(),
            path.join("results.csv").display()
        );
    }
    if let Some(dir) = dir.filter(|d| !d.is_dir()) {
        bail!(
            "{flag} {}: the directory {} does not exist; allowed: a file path in an existing directory",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// The input files of a command: --system, --ccl, --plan (if a file).
pub fn inputs_of<'a>(
    system: &'a SystemArg,
    ccl: Option<&'a Path>,
    plan: Option<&'a Path>,
) -> Vec<(&'static str, &'a Path)> {
    [
        ("--system", system.system.as_deref()),
        ("--ccl", ccl),
        ("--plan", plan.filter(|p| p.is_file())),
    ]
    .into_iter()
    .filter_map(|(flag, p)| Some((flag, p?)))
    .collect()
}

/// Refuses a command whose output files (in the directory of `flag`) include
/// its --system file.
pub fn check_distinct_files(flag: &str, outputs: &[PathBuf], system: &SystemArg) -> Result<()> {
    let outs: Vec<(&str, &Path)> = outputs.iter().map(|p| (flag, p.as_path())).collect();
    kernbench::output::check_distinct(&outs, &inputs_of(system, None, None))
        .map_err(anyhow::Error::msg)
}

/// Refuses a directory flag naming something that is not a directory
/// (it is created if missing).
pub fn check_output_dir(flag: &str, path: &Path) -> Result<()> {
    if path.exists() && !path.is_dir() {
        bail!(
            "{flag} {}: not a directory; allowed: a directory path (created if missing)",
            path.display()
        );
    }
    Ok(())
}

/// A sweep's result directory when --out is not given, created now:
/// results/<plan>-<UTC timestamp>, with `-2`, `-3` … if another sweep took
/// that name in the same second.
pub fn default_out(plan: &str) -> Result<PathBuf> {
    let stem = format!("{plan}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    kernbench::output::new_dir(Path::new("results"), &stem).map_err(anyhow::Error::msg)
}
