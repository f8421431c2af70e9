//! A 2-layer TP MLP, the smallest model that uses both layers:
//! ColumnParallelLinear then RowParallelLinear on seeded weights, checked
//! against a single-device f32 reference with a first-order f16 error bound,
//! with each rank's time broken down. `kernbench tp-mlp` prints it.

use super::{
    BiasPolicy, Breakdown, ColumnParallelLinear, RowParallelLinear, Timeline,
    initialize_model_parallel, replicated, seeded_matrix,
};
use crate::autotune::init_process_group;
use crate::gemm::Placement;
use kernbench_ccl::CclConfig;
use kernbench_dist::DistError;
use kernbench_spec::spec::System;
use kernbench_systems::Tick;
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

/// Seeds of the MLP's data: fc1's weight (its bias is +1), fc2's, the input.
const SEED_FC1: u64 = 11;
const SEED_FC2: u64 = 21;
const SEED_X: u64 = 31;

/// f16's unit roundoff, 2⁻¹¹.
const U: f32 = 1.0 / 2048.0;

/// The MLP's sizes: X (batch, d_in) → (batch, d_hidden) → (batch, d_out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpShape {
    pub batch: usize,
    pub d_in: usize,
    pub d_hidden: usize,
    pub d_out: usize,
}

impl MlpShape {
    /// Refuses a shape with an empty side, or a matrix (of f32 values on the
    /// host) whose bytes an address cannot count.
    pub fn check(&self) -> Result<(), DistError> {
        let MlpShape {
            batch,
            d_in,
            d_hidden,
            d_out,
        } = *self;
        let matrices = [
            ("batch x d_in", batch, d_in),
            ("batch x d_hidden", batch, d_hidden),
            ("batch x d_out", batch, d_out),
            ("d_in x d_hidden", d_in, d_hidden),
            ("d_hidden x d_out", d_hidden, d_out),
        ];
        for (what, rows, cols) in matrices {
            let bytes = rows.checked_mul(cols).and_then(|n| n.checked_mul(4));
            if rows == 0 || cols == 0 || bytes.is_none_or(|b| b > isize::MAX as usize) {
                return Err(DistError::Config(format!(
                    "{what} = {rows} x {cols}: not a matrix this machine can hold; allowed: sides of at least 1 whose f32 product fits in {} bytes",
                    isize::MAX
                )));
            }
        }
        Ok(())
    }
}

impl Default for MlpShape {
    /// A small default: B = 1, 512 → 2048 → 512 (hidden = 4 × input, as in a
    /// transformer block).
    fn default() -> Self {
        MlpShape {
            batch: 1,
            d_in: 512,
            d_hidden: 2048,
            d_out: 512,
        }
    }
}

/// One TP size's run.
#[derive(Debug, Clone, PartialEq)]
pub struct MlpReport {
    pub tp: u32,
    /// World size: tp × data-parallel replicas.
    pub world: u32,
    /// Largest |device − f32 reference| over every rank's output.
    pub max_abs_err: f32,
    /// The first-order f16 bound at that element, and the largest |reference|.
    pub bound_at_max: f32,
    pub max_abs_ref: f32,
    /// Whether every element of every rank is within its bound.
    pub within_bound: bool,
    /// Rank 0's time breakdown, ticks.
    pub breakdown: Breakdown,
    /// Rank 0's all-reduce (its own time), ticks.
    pub allreduce_ticks: Tick,
    /// The configuration it ran (under `auto`, the tuner's pick).
    pub allreduce_config: String,
    /// Every rank's output, row-major.
    pub outputs: Vec<Vec<f32>>,
}

/// The reference output and each element's error bound (module doc of
/// docs/model.md §Tensor parallelism): the device rounds fc1's products,
/// partial sums, bias add and output to f16 (≤ (2·s₁ + 1)·u·(|X||W₁| + |b₁|)
/// with s₁ = ⌈d_in / 32⌉ k-steps at most), and fc2's likewise on each
/// cube's part of k, plus one rounding per participant the all-reduce adds
/// (P = tp × cubes), plus fc1's error carried through |W₂|.
pub fn reference(
    shape: MlpShape,
    bias: Option<BiasPolicy>,
    tp: u32,
    cubes: u32,
) -> (Vec<f32>, Vec<f32>) {
    let MlpShape {
        batch: b,
        d_in,
        d_hidden: dh,
        d_out,
    } = shape;
    let x = kernbench_runtime::seeded::uniform(SEED_X, b * d_in);
    let w1 = seeded_matrix(SEED_FC1, d_in, dh);
    let w2 = seeded_matrix(SEED_FC2, dh, d_out);
    let b1 = seeded_matrix(SEED_FC1 + 1, 1, dh);
    let b2 = seeded_matrix(SEED_FC2 + 1, 1, d_out);
    let (b1, b2) = match bias {
        Some(_) => (b1, b2),
        None => (vec![0.0; dh], vec![0.0; d_out]),
    };
    // a · w + bias, for `b` rows.
    let mm = |a: &[f32], w: &[f32], k: usize, n: usize, bias: &[f32]| {
        (0..b * n)
            .map(|e| {
                let (i, j) = (e / n, e % n);
                (0..k).fold(bias[j], |acc, p| acc + a[i * k + p] * w[p * n + j])
            })
            .collect::<Vec<f32>>()
    };
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let y = mm(&x, &w1, d_in, dh, &b1);
    let s1 = d_in.div_ceil(32) as f32;
    let e_y: Vec<f32> = mm(&abs(&x), &abs(&w1), d_in, dh, &abs(&b1))
        .iter()
        .map(|v| (2.0 * s1 + 1.0) * U * v)
        .collect();
    let z = mm(&y, &w2, dh, d_out, &b2);
    let z_abs = mm(&abs(&y), &abs(&w2), dh, d_out, &abs(&b2));
    let carried = mm(&e_y, &abs(&w2), dh, d_out, &vec![0.0; d_out]);
    let parts = tp * cubes;
    let s2 = (dh / parts as usize).div_ceil(32) as f32;
    let k2 = 2.0 * s2 + parts as f32 + 1.0;
    let bound = (0..b * d_out)
        .map(|i| carried[i] + k2 * U * z_abs[i])
        .collect();
    (z, bound)
}

/// Runs the MLP with TP = `tp` on `sys` (world = its SIP count, DP = world
/// / tp), functional, and checks every rank's output against the reference.
pub fn run_mlp(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    tp: u32,
    shape: MlpShape,
    bias: Option<BiasPolicy>,
) -> Result<MlpReport, DistError> {
    run_mlp_placed(sys, ccl, algorithm, (tp, shape, bias), &Placement::Owners)
}

/// [`run_mlp`] with the layers' kernels on the PEs `placement` names.
pub fn run_mlp_placed(
    sys: &System,
    ccl: &CclConfig,
    algorithm: &str,
    (tp, shape, bias): (u32, MlpShape, Option<BiasPolicy>),
    placement: &Placement,
) -> Result<MlpReport, DistError> {
    shape.check()?;
    let mut pg = init_process_group(sys, ccl, algorithm, DataMode::Functional)?;
    let mut mp = initialize_model_parallel(&mut pg, tp)?;
    mp.placement = placement.clone();
    let world = pg.world_size;
    let cubes = sys.cubes_per_sip();
    let x = kernbench_runtime::seeded::uniform(SEED_X, shape.batch * shape.d_in);
    let outputs = Mutex::new(vec![Vec::new(); world as usize]);
    let rank0 = Mutex::new((Breakdown::default(), 0, String::new()));
    pg.spawn(world, |ctx| {
        let fc1 = ColumnParallelLinear::new(
            ctx,
            &mp,
            (shape.d_in, shape.d_hidden),
            bias.is_some(),
            Some(SEED_FC1),
        )?;
        let fc2 = RowParallelLinear::new(
            ctx,
            &mp,
            (shape.d_hidden, shape.d_out),
            bias,
            Some(SEED_FC2),
        )?;
        let input = ctx.empty((shape.batch, shape.d_in), replicated(cubes))?;
        ctx.write(&input, &x)?;
        let mut time = Timeline::start(ctx);
        let h = fc1.forward(ctx, &input, &mut time)?;
        let y = fc2.forward(ctx, &mp, &h, &mut time)?;
        if ctx.rank() == 0 {
            *rank0.lock().unwrap() = (
                time.breakdown(ctx),
                time.collective_ticks()[0],
                time.collective_configs().swap_remove(0),
            );
        }
        outputs.lock().unwrap()[ctx.rank() as usize] = ctx.read(&y)?;
        Ok(())
    })?;
    let (want, bound) = reference(shape, bias, tp, cubes);
    let (mut worst, mut at, mut within) = (0f32, 0, true);
    let outputs = outputs.into_inner().unwrap();
    for out in &outputs {
        for (i, (g, w)) in out.iter().zip(&want).enumerate() {
            let err = (g - w).abs();
            within &= err <= bound[i];
            if err > worst {
                (worst, at) = (err, i);
            }
        }
    }
    let (breakdown, allreduce_ticks, allreduce_config) = rank0.into_inner().unwrap();
    Ok(MlpReport {
        tp,
        world,
        max_abs_err: worst,
        bound_at_max: bound[at],
        max_abs_ref: want.iter().fold(0f32, |m, v| m.max(v.abs())),
        within_bound: within,
        breakdown,
        allreduce_ticks,
        allreduce_config,
        outputs,
    })
}

/// The first lines of `kernbench tp-mlp`'s table: the model and system on a
/// comment line, then the column header. `bias` and `algorithm` as given.
pub fn table_head(shape: MlpShape, bias: &str, algorithm: &str, sys: &System) -> String {
    let MlpShape {
        batch,
        d_in,
        d_hidden,
        d_out,
    } = shape;
    format!(
        "# tp-mlp: X ({batch} x {d_in}) -> fc1 ColumnParallel -> ({batch} x {d_hidden}) -> fc2 RowParallel -> ({batch} x {d_out}); bias {bias}; all-reduce '{algorithm}'; {} cubes x {} PEs per SIP; times of rank 0 in us\n{:>3} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}  {}\n",
        sys.cubes_per_sip(),
        sys.pes_per_cube(),
        "tp",
        "world",
        "max|err|",
        "max|ref|",
        "total",
        "compute",
        "comm",
        "hidden",
        "exposed",
        "launch+wait",
        "all-reduce"
    )
}

/// One TP size's line of the table, ending with the configuration its
/// all-reduce ran; `tick_us` converts ticks to µs.
pub fn table_row(r: &MlpReport, tick_us: f64) -> String {
    let b = r.breakdown;
    let us = |t: Tick| t as f64 * tick_us;
    format!(
        "{:>3} {:>5} {:>10.3e} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12.3}  {}\n",
        r.tp,
        r.world,
        r.max_abs_err,
        r.max_abs_ref,
        us(b.total),
        us(b.compute),
        us(b.communication),
        us(b.hidden),
        us(b.communication - b.hidden),
        us(b.launch),
        r.allreduce_config
    )
}

/// The table's last line: how its columns add up.
pub const TABLE_NOTE: &str = "# total = compute + exposed + launch+wait; comm = hidden + exposed (each collective's own time); max|err| over every rank's output against the single-device f32 reference, each element checked against its first-order f16 bound (docs/model.md §Tensor parallelism)\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// The head and a row as `tp-mlp --tp 2 --batch 2 --d-in 64 --d-hidden
    /// 128 --d-out 64` prints them on the default system.
    #[test]
    fn table_lines_are_tp_mlps_to_the_byte() {
        let shape = MlpShape {
            batch: 2,
            d_in: 64,
            d_hidden: 128,
            d_out: 64,
        };
        let head = table_head(shape, "rank0", "auto", &System::embedded_default());
        assert_eq!(
            head,
            "# tp-mlp: X (2 x 64) -> fc1 ColumnParallel -> (2 x 128) -> fc2 RowParallel -> (2 x 64); bias rank0; all-reduce 'auto'; 16 cubes x 8 PEs per SIP; times of rank 0 in us\n \
             tp world   max|err|   max|ref|      total    compute       comm     hidden    exposed  launch+wait  all-reduce\n"
        );
        let report = MlpReport {
            tp: 2,
            world: 2,
            max_abs_err: 1.761e-3,
            bound_at_max: 1e-2,
            max_abs_ref: 1.362,
            within_bound: true,
            breakdown: Breakdown {
                total: 15416,
                compute: 1162,
                communication: 11204,
                hidden: 0,
                launch: 3050,
            },
            allreduce_ticks: 11204,
            allreduce_config: "dims".into(),
            outputs: Vec::new(),
        };
        assert_eq!(
            table_row(&report, 1e-3),
            "  2     2   1.761e-3      1.362     15.416      1.162     11.204      0.000     11.204        3.050  dims\n"
        );
    }
}
