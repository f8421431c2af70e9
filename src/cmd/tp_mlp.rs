//! `kernbench tp-mlp`: the 2-layer tensor-parallel MLP per TP size.

use super::args::{BudgetArg, SystemArg, parse_count};
use anyhow::{Result, bail};
use clap::Args;
use kernbench::gemm::Placement;
use kernbench::tp::{BiasPolicy, mlp};

#[derive(Args)]
pub struct TpMlpArgs {
    #[command(flatten)]
    system: SystemArg,
    /// TP sizes to run, comma-separated; each runs on a copy of the system
    /// with TP × --dp SIPs (same network kind, 2-D grids as square as the
    /// count allows).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8", allow_hyphen_values = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    tp: Vec<u32>,
    /// Data-parallel replicas: the world is TP × DP ranks, TP groups of
    /// consecutive ranks.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    dp: u32,
    /// Tokens (rows of X).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = parse_count)]
    batch: usize,
    /// Input features of fc1.
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = parse_count)]
    d_in: usize,
    /// fc1's output = fc2's input features (split over TP ranks, then cubes).
    #[arg(long, default_value_t = 2048, allow_negative_numbers = true, value_parser = parse_count)]
    d_hidden: usize,
    /// Output features of fc2.
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = parse_count)]
    d_out: usize,
    /// Biases: rank0 (Megatron: fc2's bias on TP rank 0 only, folded in
    /// before the all-reduce), replicate (every rank adds it after), none.
    #[arg(long, default_value = "rank0", value_parser = ["rank0", "replicate", "none"])]
    bias: String,
    /// The ccl.yaml entry whose algorithm the all-reduce runs; auto (the
    /// default): the autotuner's pick for its size and TP group, tuned on
    /// first use, named in the table's last column.
    #[arg(long, default_value = "auto")]
    algorithm: String,
    /// Which PEs compute the GEMMs and bias adds: owners (the default: the
    /// PEs holding each output, pe0 included) or off-leader (every PE of a
    /// cube but pe0, where the all-reduce runs).
    #[arg(long, default_value = "owners", value_parser = ["owners", "off-leader"])]
    placement: String,
    #[command(flatten)]
    budget: BudgetArg,
}

/// Knobs that shrink a tp-mlp.
const TP_MLP_KNOBS: &str =
    "fewer or smaller --tp sizes, a smaller --dp, --batch or --d-in/--d-hidden/--d-out";

pub fn run(a: TpMlpArgs) -> Result<()> {
    let base = a.system.load()?;
    let ccl = kernbench::ccl::CclConfig::embedded_default();
    let bias = match a.bias.as_str() {
        "rank0" => Some(BiasPolicy::Rank0),
        "replicate" => Some(BiasPolicy::Replicate),
        _ => None,
    };
    let shape = mlp::MlpShape {
        batch: a.batch,
        d_in: a.d_in,
        d_hidden: a.d_hidden,
        d_out: a.d_out,
    };
    let config = ccl.entry(&a.algorithm).map_err(|(problem, allowed)| {
        anyhow::anyhow!("--algorithm: {problem}; allowed: {allowed}")
    })?;
    check_hidden_split(&a, base.cubes_per_sip())?;
    let cost = kernbench::command_costs::tp_mlp(&base, &ccl, config, &a.tp, a.dp, shape)
        .map_err(anyhow::Error::msg)?;
    cost.check("tp-mlp", &a.budget.budget(), TP_MLP_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", base.origin))?;
    let weights = cost.weights();
    let progress = kernbench::progress::Progress::new("tp-mlp", "TP sizes", &weights);
    let tick_us = base.spec.system.tick_ns / 1e3;
    let placement = match a.placement.as_str() {
        "off-leader" => {
            println!("# compute placement: off-leader (every PE of a cube but pe0)");
            Placement::off_leader(base.pes_per_cube())
        }
        _ => Placement::Owners,
    };
    print!("{}", mlp::table_head(shape, &a.bias, &a.algorithm, &base));
    for (k, &tp) in a.tp.iter().enumerate() {
        // The estimate has built this system already: the product fits.
        let sys = base.with_sips(tp * a.dp)?;
        let r = mlp::run_mlp_placed(&sys, &ccl, &a.algorithm, (tp, shape, bias), &placement)?;
        progress.tick(weights[k], &cost.parts[k].0);
        print!("{}", mlp::table_row(&r, tick_us));
        if !r.within_bound {
            bail!(
                "tp {tp}: an output element is outside its f16 error bound (max |err| {:.3e}): a simulator bug, please report it",
                r.max_abs_err
            );
        }
    }
    progress.finish();
    print!("{}", mlp::TABLE_NOTE);
    Ok(())
}

/// fc1's outputs (= fc2's inputs) split over each TP size's ranks, then
/// over the cubes of each SIP: --d-hidden must divide evenly for every one.
fn check_hidden_split(a: &TpMlpArgs, cubes: u32) -> Result<()> {
    let parts = |tp: u32| u64::from(tp) * u64::from(cubes);
    let gcd = |mut x: u64, mut y: u64| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    let all = a.tp.iter().fold(1u64, |l, &tp| {
        let p = parts(tp);
        (l / gcd(l, p)).saturating_mul(p)
    });
    let splits = |tp: &u32| (a.d_hidden as u64).is_multiple_of(parts(*tp));
    if let Some(&tp) = a.tp.iter().find(|tp| !splits(tp)) {
        bail!(
            "--d-hidden {} over --tp {tp} ranks and the {cubes} cubes of each SIP (sip.cube_mesh) is not a whole number per cube; allowed: a --d-hidden that is a multiple of {} for --tp {}",
            a.d_hidden,
            all,
            a.tp.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(())
}
