//! Argument groups and value parsers shared by the subcommands.

use anyhow::{Result, bail};
use clap::Args;
use kernbench::ccl::{CclConfig, Job};
use kernbench::estimate::{Budget, NetworkChoice};
use kernbench::spec::{ComputeModel, System, presets};
use std::path::{Path, PathBuf};

/// Where `autotune` and `run --algorithm auto` cache decisions by default.
pub const AUTOTUNE_CACHE: &str = ".kernbench/autotune";

/// Which system to use: the embedded default unless --system or --preset.
#[derive(Args)]
pub struct SystemArg {
    /// System spec YAML file (default: the embedded configs/topology.yaml).
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    pub system: Option<PathBuf>,
    /// A built-in preset from configs/topologies/ (mesh_16, ring_4096,
    /// ring_4096_lean, torus_4096, torus_6_rect).
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
}

impl SystemArg {
    pub fn load(&self) -> Result<System> {
        Ok(match (&self.system, &self.preset) {
            (Some(path), _) => System::from_file(path)?,
            (None, Some(name)) => presets::preset(name)?,
            (None, None) => System::embedded_default(),
        })
    }
}

/// The memory and time a run may use: a run whose estimate (docs/model.md
/// §Cost estimate) is above either is refused before anything is built.
#[derive(Args)]
pub struct BudgetArg {
    /// Refuse runs whose estimated peak memory exceeds SIZE (e.g. 512M, 8G;
    /// default: 80% of this machine's memory).
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true,
          value_parser = kernbench::sweep::plan::parse_bytes)]
    pub max_memory: Option<u64>,
    /// Refuse work estimated to take more than SECONDS to simulate in all
    /// (a sweep: its points together on --jobs; default: 3600; the estimate
    /// is good to a factor of about 4).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = parse_seconds)]
    pub max_time: Option<f64>,
}

impl BudgetArg {
    /// The budget; its bytes also become the heap ceiling runs stop at
    /// (`kernbench::systems::heap`), where the estimate missed memory.
    pub fn budget(&self) -> Budget {
        let default = Budget::of_this_machine();
        let budget = Budget {
            bytes: self.max_memory.unwrap_or(default.bytes),
            seconds: self.max_time.unwrap_or(default.seconds),
        };
        kernbench::systems::heap::set_ceiling(budget.bytes);
        budget
    }
}

/// How messages cross the network in the command's runs.
#[derive(Args)]
pub struct NetworkArg {
    /// packet: exact store-and-forward packets; flow: a flow per leg of a
    /// message's route, links serving earlier flows first, events per
    /// message and leg instead of per packet-hop (for thousands of SIPs;
    /// docs/model.md §Flow-level network); auto: packet
    /// where a run's estimate fits the budget, flow otherwise if estimated
    /// faster (one-packet messages cost flow mode a leg a hop). Default: the
    /// system spec's network.model (packet unless it says flow).
    #[arg(long, value_name = "MODEL", value_parser = ["packet", "flow", "auto"])]
    pub network: Option<String>,
}

impl NetworkArg {
    /// The choice, `auto` deciding within `budget`.
    pub fn choice(&self, budget: Budget) -> Result<NetworkChoice> {
        match self.network.as_deref() {
            None => Ok(NetworkChoice::Spec),
            Some(name) => {
                NetworkChoice::parse(name, budget).map_err(|e| anyhow::anyhow!("--network: {e}"))
            }
        }
    }

    /// For a command whose runs share one model: sets `sys`'s to a fixed
    /// choice; `auto` is refused, `why` saying why it cannot apply.
    pub fn set_fixed(&self, sys: &mut System, why: &str) -> Result<()> {
        if self.network.as_deref() == Some("auto") {
            bail!("--network auto: {why}; allowed: --network packet or --network flow");
        }
        if let NetworkChoice::Fixed(model) = self.choice(Budget::of_this_machine())? {
            sys.spec.network.model = model;
        }
        Ok(())
    }
}

/// The compute model a `--compute` value names (clap has checked it is
/// `tiled` or `measured`).
pub fn compute_model(name: &str) -> ComputeModel {
    match name {
        "tiled" => ComputeModel::Tiled,
        _ => ComputeModel::Measured,
    }
}

/// The ccl config of `--ccl`, else the embedded configs/ccl.yaml.
pub fn load_ccl(path: Option<&Path>) -> Result<CclConfig> {
    Ok(match path {
        Some(path) => CclConfig::from_file(path)?,
        None => CclConfig::embedded_default(),
    })
}

/// A whole number of at least `min`; anything else (negative, a fraction,
/// text, too large) is named with the range.
pub fn at_least(min: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| match s.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "'{s}' is not in {min}..={}; allowed: a whole number from {min} to {}",
            u64::MAX,
            u64::MAX
        )),
    }
}

/// A count of rows or features: a whole number of at least 1.
pub fn parse_count(s: &str) -> Result<usize, String> {
    let n = at_least(1)(s)?;
    usize::try_from(n).map_err(|_| format!("'{s}' is too large for this machine"))
}

/// A buffer size in bytes (K, M, G suffixes); a negative one is named as such.
pub fn parse_size(s: &str) -> Result<u64, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!(
            "'{s}' is negative; allowed: an even number of bytes >= 2 (2 bytes per element), e.g. 4096, 64K, 16M, 1G"
        ));
    }
    kernbench::sweep::plan::parse_bytes(s)
}

/// Bytes of whole f16 elements (`run`'s size rule), e.g. 16K.
pub fn parse_elem_bytes(s: &str) -> Result<u64, String> {
    let bytes = parse_size(s)?;
    Job::elems_of(bytes).map_err(|(problem, allowed)| format!("{problem}; allowed: {allowed}"))?;
    Ok(bytes)
}

/// A time limit: seconds, finite and above 0.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a time; use seconds > 0, e.g. 600")),
    }
}

/// `-c`: 1 checks, 0 does not (nccl-tests' values; true/false also work).
pub fn parse_check(s: &str) -> Result<bool, String> {
    match s {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(format!(
            "'{s}' is not a check setting; use 1 (check) or 0 (timing only)"
        )),
    }
}

/// `--shard K/N`: shard K of N, 1 <= K <= N.
pub fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("'{s}' is not a shard; use K/N with 1 <= K <= N, e.g. 2/3");
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (
        k.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// `--jobs`: at least 1; more than the points or 4x the cores is clamped
/// with a note (default: the cores).
pub fn sweep_jobs(asked: Option<usize>, points: usize) -> Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(jobs) = asked else {
        return Ok(cores);
    };
    if jobs == 0 {
        bail!(
            "--jobs 0: a sweep needs at least one job; allowed: 1 to {} here",
            4 * cores
        );
    }
    let most = (4 * cores).min(points.max(1));
    if jobs > most {
        eprintln!("note: --jobs {jobs} clamped to {most} ({cores} cores, {points} points)");
        return Ok(most);
    }
    Ok(jobs)
}
