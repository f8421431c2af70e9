//! A transformer layer's vector ops: each op's time against its closed form
//! from the spec (passes × ⌈elems / vector_lanes⌉, a row reduction's tree),
//! each op's and each kernel's values against an f64 reference, and the
//! refusals of a layout a row-wise op cannot run on.
//!
//! Bounds (f16, unit roundoff u = 2^-11): one op rounds its f32 result to
//! f16 once, so `|err| <= u·|ref| + 2^-20` (the absolute term covers f16
//! subnormals and f32 cancellation in GELU's `1 + tanh` far below zero).
//! A kernel chains several ops, each rounding once; the bound is its chain
//! length times u on the magnitudes involved (stated at each kernel).

use crate::common;

use half::f16;
use kernbench::ccl::CclConfig;
use kernbench::dist::{DPPolicy, DistError, Rank, Tensor, Work, init_process_group};
use kernbench::gemm::Placement;
use kernbench::kernel::{Addr, Tl};
use kernbench::machine::Machine;
use kernbench::ops::{gelu, layer_norm_rows, residual_add, softmax_rows};
use kernbench::seeded;
use kernbench::spec::System;
use kernbench::topology::address::{Location, Space};
use kernbench::tp::{cube_cols, replicated};
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::{BinOp, DType, MemLoc, Op, Place, Reduce};
use kernbench_systems::trace::OpRecord;
use std::sync::Mutex;

/// f16 unit roundoff.
const U: f64 = 1.0 / 2048.0;
/// Lanes of the test PE's vector unit: a row of 50 takes ⌈50/16⌉ = 4 passes.
const LANES: u64 = 16;
/// Passes per op, as docs/model.md's vector-unit table states them.
const PASSES: [(&str, u64); 6] = [
    ("exp", 4),
    ("gelu", 12),
    ("gelu_grad", 16),
    ("rsqrt", 4),
    ("recip", 3),
    ("add", 1),
];

/// One SIP of one PE, ideal links and memories, `LANES` vector lanes: a
/// kernel's time is its vector ops'.
fn one_pe() -> System {
    let mut s = common::lean_links(1, 64, 100).spec;
    s.pe.vector_lanes = LANES as u32;
    System::from_spec(s, "test").expect("test spec is valid")
}

/// The op a [`one_op`] launch runs on its tile at TCM 0.
#[derive(Clone, Copy)]
enum Which {
    Exp,
    Gelu,
    GeluGrad,
    Rsqrt(f32),
    Recip,
    Add,
    RowMax,
    RowSum,
    RowSub,
    RowMul,
}

/// Loads a tile of `elems`, runs one op over rows of `cols` and stores
/// its result at TCM 1 MiB.
fn one_op(tl: &mut Tl, &(which, elems, cols): &(Which, usize, usize)) {
    let x = tl.load(Addr::tcm(0), elems);
    let y = match which {
        Which::Exp => tl.exp(x),
        Which::Gelu => tl.gelu(x),
        Which::GeluGrad => tl.gelu_grad(x),
        Which::Rsqrt(eps) => tl.rsqrt(x, eps),
        Which::Recip => tl.recip(x),
        Which::Add => tl.add(x, x),
        Which::RowMax => tl.row_max(x, cols),
        Which::RowSum => tl.row_sum(x, cols),
        Which::RowSub | Which::RowMul => {
            let per_row = tl.load(Addr::tcm(512 << 10), elems / cols);
            match which {
                Which::RowSub => tl.row_sub(x, per_row, cols),
                _ => tl.row_mul(x, per_row, cols),
            }
        }
    };
    tl.store(Addr::tcm(1 << 20), y);
}

fn tcm(offset: u64) -> Location {
    Location {
        space: Space::Tcm,
        sip: 0,
        cube: 0,
        pe: 0,
        offset,
    }
}

/// Runs `which` on `x` (rows of `cols`) with `per_row` scalars: the op's
/// (name, ticks) and its output.
fn run_op(which: Which, x: &[f32], per_row: &[f32], cols: usize) -> ((String, u64), Vec<f64>) {
    let sys = one_pe();
    let mut m = Machine::build_with(&sys, DataMode::Functional).unwrap();
    let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
    m.write(tcm(0), &h(x)).unwrap();
    m.write(tcm(512 << 10), &h(per_row)).unwrap();
    m.record_ops();
    let pe = m.pe_index(0, 0, 0);
    m.launch(one_op, &(which, x.len(), cols), &[pe]).unwrap();
    let rec = m.op_records();
    let r = rec
        .iter()
        .find(|r| !matches!(r.op, "load" | "store"))
        .expect("the op ran");
    let out_elems = match which {
        Which::RowMax | Which::RowSum => x.len() / cols,
        _ => x.len(),
    };
    let out = m.read(tcm(1 << 20), out_elems).unwrap();
    let out = out.iter().map(|v| f64::from(v.to_f32())).collect();
    ((r.op.to_string(), r.end - r.start), out)
}

/// `n` seeded values in [lo, hi), each an f16.
fn values(seed: u64, n: usize, (lo, hi): (f32, f32)) -> Vec<f32> {
    seeded::uniform(seed, n)
        .into_iter()
        .map(|v| f16::from_f32(lo + (v + 1.0) / 2.0 * (hi - lo)).to_f32())
        .collect()
}

fn gelu_ref(x: f64) -> f64 {
    let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
    0.5 * x * (1.0 + inner.tanh())
}

/// GELU's derivative: 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²).
fn gelu_grad_ref(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let t = (c * (x + 0.044715 * x.powi(3))).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
}

/// Asserts `|got − want| <= rel·|want| + abs` element by element.
fn within(what: &str, got: &[f64], want: &[f64], (rel, abs): (f64, f64)) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let bound = rel * w.abs() + abs;
        assert!(
            (g - w).abs() <= bound,
            "{what}[{i}]: got {g}, want {w} (|err| {} > {bound})",
            (g - w).abs()
        );
    }
}

/// Elementwise ops cost passes × ⌈elems / lanes⌉ (add keeps one pass) and
/// equal the f64 function of their f16 input within one f16 rounding.
#[test]
fn elementwise_ops_take_their_passes_and_round_once() {
    let (rows, cols) = (6, 50);
    let x = values(1, rows * cols, (-4.0, 4.0));
    let pos = values(2, rows * cols, (0.25, 4.0));
    let eps = 1e-5f32;
    type Case<'a> = (Which, &'a [f32], fn(f64) -> f64);
    let cases: [Case; 6] = [
        (Which::Exp, &x, f64::exp),
        (Which::Gelu, &x, gelu_ref),
        (Which::GeluGrad, &x, gelu_grad_ref),
        (Which::Rsqrt(eps), &pos, |v| {
            1.0 / (v + 1e-5f32 as f64).sqrt()
        }),
        (Which::Recip, &x, |v| 1.0 / v),
        (Which::Add, &x, |v| 2.0 * v),
    ];
    let pass_ticks = (rows * cols) as u64 / LANES + 1; // ⌈300/16⌉ = 19
    for (which, input, f) in cases {
        let ((name, ticks), got) = run_op(which, input, &[], cols);
        let passes = PASSES.iter().find(|p| p.0 == name).unwrap().1;
        assert_eq!(ticks, passes * pass_ticks, "{name} ticks");
        let want: Vec<f64> = input.iter().map(|&v| f(f64::from(v))).collect();
        within(&name, &got, &want, (U, 2f64.powi(-20)));
    }
}

/// A row reduction of r rows of c costs r·(⌈c/lanes⌉ + ⌈log2 min(c, lanes)⌉):
/// 6·(4 + 4) = 48 ticks for rows of 50 on 16 lanes; the max is exact, the
/// sum (f32) rounds once. A row broadcast costs one pass like add.
#[test]
fn row_ops_take_their_tree_and_match_the_reference() {
    let (rows, cols) = (6usize, 50usize);
    let x = values(3, rows * cols, (-1.0, 1.0));
    let per_row = values(4, rows, (0.5, 2.0));
    let tree = |c: u64| c.div_ceil(LANES) + (c.min(LANES) as f64).log2().ceil() as u64;
    assert_eq!(tree(50), 8);
    let rows_of = |f: &dyn Fn(&[f32]) -> f64| x.chunks(cols).map(f).collect::<Vec<_>>();
    let max = rows_of(&|r| r.iter().map(|&v| f64::from(v)).fold(f64::MIN, f64::max));
    let sum = rows_of(&|r| r.iter().map(|&v| f64::from(v)).sum());
    for (which, want) in [(Which::RowMax, &max), (Which::RowSum, &sum)] {
        let ((name, ticks), got) = run_op(which, &x, &[], cols);
        assert_eq!(ticks, rows as u64 * tree(cols as u64), "{name} ticks");
        within(&name, &got, want, (U, 2f64.powi(-20)));
    }
    // Rows shorter than the lanes: 30 rows of 10 cost 30·(1 + 4).
    let ((name, ticks), got) = run_op(Which::RowMax, &x, &[], 10);
    assert_eq!((name.as_str(), ticks, got.len()), ("row_max", 30 * 5, 30));
    assert_eq!(tree(10), 5);
    let pairs = |op: fn(f64, f64) -> f64| -> Vec<f64> {
        let s = |i: usize| f64::from(per_row[i / cols]);
        x.iter()
            .enumerate()
            .map(|(i, &v)| op(f64::from(v), s(i)))
            .collect()
    };
    type Combine = fn(f64, f64) -> f64;
    let cases: [(Which, Combine); 2] =
        [(Which::RowSub, |a, b| a - b), (Which::RowMul, |a, b| a * b)];
    for (which, op) in cases {
        let ((name, ticks), got) = run_op(which, &x, &per_row, cols);
        assert_eq!(ticks, (rows * cols) as u64 / LANES + 1, "{name} ticks");
        within(&name, &got, &pairs(op), (U, 2f64.powi(-20)));
    }
}

/// A row op over a tile that is not whole rows fails the trace naming the op and what is allowed.
#[test]
fn a_row_op_over_a_partial_row_is_refused() {
    let mut m = Machine::build_with(&one_pe(), DataMode::TimingOnly).unwrap();
    let pe = m.pe_index(0, 0, 0);
    let e = m
        .launch(one_op, &(Which::RowSum, 300, 7), &[pe])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("sip0.cube0.pe0: row_sum: a tile of 300 elements is not whole rows of 7; allowed: rows x cols elements, 0 < cols <= 4294967295"),
        "{e}"
    );
}

/// What a kernel test launches on the tensor (its values already written).
type Launcher<'a> = &'a (dyn Fn(&mut Rank, &Tensor) -> Result<Work, DistError> + Sync);

/// A program whose row op meets a register of partial rows (sizes the
/// tracer cannot see, as in a loop) fails the run naming the op, the sizes
/// and what is allowed; so does a row broadcast with the wrong scalar count.
#[test]
fn the_engine_refuses_a_row_op_over_partial_rows() {
    let tcm0 = |elems: u64| Place::Fixed {
        loc: MemLoc {
            space: Space::Tcm,
            instance: MemLoc::LOCAL,
            offset: 0,
        },
        elems,
    };
    let reduce = Op::RowReduce {
        op: Reduce::Sum,
        dst: 1,
        src: 0,
        cols: 7,
    };
    let broadcast = Op::RowBroadcast {
        op: BinOp::Mul,
        dst: 2,
        a: 0,
        b: 1,
        cols: 10,
    };
    let cases = [
        (
            vec![
                Op::Load {
                    dst: 0,
                    src: tcm0(300),
                    dtype: DType::F16,
                },
                reduce,
            ],
            "row_sum: a register of 300 elements is not whole rows of 7; allowed: a register of rows x cols elements, cols > 0",
        ),
        (
            vec![
                Op::Load {
                    dst: 0,
                    src: tcm0(300),
                    dtype: DType::F16,
                },
                Op::Load {
                    dst: 1,
                    src: tcm0(3),
                    dtype: DType::F16,
                },
                broadcast,
            ],
            "row_mul: 30 rows of 10 take one scalar per row, and the scalars are 3",
        ),
    ];
    for (ops, want) in cases {
        let e = common::program_error(&one_pe(), ops, 3);
        assert!(e.contains(want), "missing {want:?} in {e}");
    }
}

/// One SIP of two cubes of the default system (8 PEs each).
fn two_cubes() -> System {
    common::system(|s| {
        s.system.sips.count = 1;
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (2, 1);
    })
}

/// The (rows, cols) tensor's values after `kernel` on [`two_cubes`], laid
/// out as `policy`, and the ops the run issued.
fn run_kernel(
    (rows, cols): (usize, usize),
    policy: fn(u32) -> DPPolicy,
    x: &[f32],
    kernel: Launcher,
) -> Result<(Vec<f64>, Vec<OpRecord>), String> {
    let sys = two_cubes();
    let mut pg = init_process_group(
        &sys,
        &CclConfig::embedded_default(),
        "pairwise",
        DataMode::Functional,
    )
    .unwrap();
    pg.machine.record_ops();
    let out = Mutex::new(Vec::new());
    pg.spawn(1, |ctx| {
        let cubes = ctx.sip_shape().0;
        let t = ctx.empty((rows, cols), policy(cubes))?;
        ctx.write(&t, x)?;
        let w = kernel(ctx, &t)?;
        ctx.wait(&w)?;
        *out.lock().unwrap() = ctx.read(&t)?.into_iter().map(f64::from).collect();
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok((out.into_inner().unwrap(), pg.machine.op_records()))
}

/// Rows spread over the cubes and their PEs.
fn pe_rows(cubes: u32) -> DPPolicy {
    DPPolicy::pe_rows(cubes, 2)
}

const SHAPE: (usize, usize) = (24, 40);

fn softmax_ref(x: &[f32], cols: usize) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|r| {
            let max = r.iter().map(|&v| f64::from(v)).fold(f64::MIN, f64::max);
            let e: Vec<f64> = r.iter().map(|&v| (f64::from(v) - max).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

/// softmax_rows equals the f64 softmax within 8u relative (six roundings:
/// the shift x − max, up to 2 in magnitude, errs by u·2 absolute, which exp
/// turns into 2u relative; then exp, the sum, the reciprocal and the
/// product, u each) plus 2^-20, and each row sums to 1 within 8u.
#[test]
fn softmax_rows_matches_f64_and_rows_sum_to_one() {
    let x = values(5, SHAPE.0 * SHAPE.1, (-1.0, 1.0));
    let (got, ops) = run_kernel(SHAPE, pe_rows, &x, &|ctx, t| {
        softmax_rows(ctx, t, &Placement::Owners)
    })
    .unwrap();
    within(
        "softmax",
        &got,
        &softmax_ref(&x, SHAPE.1),
        (8.0 * U, 2f64.powi(-20)),
    );
    for (i, row) in got.chunks(SHAPE.1).enumerate() {
        let s: f64 = row.iter().sum();
        assert!((s - 1.0).abs() <= 8.0 * U, "row {i} sums to {s}");
    }
    // Each of cube 0's 6-row shards is shared by 6 PEs, a row each: pe0
    // runs two tiles of one row of 40, each 2·(⌈40/L⌉ + ⌈log2 40⌉) for the
    // two reductions, 6·⌈40/L⌉ for row_sub, exp (4) and row_mul, and
    // 3·⌈1/L⌉ for the reciprocal of the sum.
    let lanes = u64::from(two_cubes().spec.pe.vector_lanes);
    let tile = 2 * (40u64.div_ceil(lanes) + 6) + 6 * 40u64.div_ceil(lanes) + 3;
    let vector: u64 = ops
        .iter()
        .filter(|o| (o.cube, o.pe) == (0, 0) && !matches!(o.op, "load" | "store"))
        .map(|o| o.end - o.start)
        .sum();
    assert_eq!(vector, 2 * tile, "pe0's vector ticks");
}

/// gelu and residual_add round once per element: within u relative.
#[test]
fn gelu_and_residual_add_round_once() {
    let x = values(6, SHAPE.0 * SHAPE.1, (-4.0, 4.0));
    let got = run_kernel(SHAPE, pe_rows, &x, &|ctx, t| {
        gelu(ctx, t, &Placement::Owners)
    })
    .unwrap()
    .0;
    let want: Vec<f64> = x.iter().map(|&v| gelu_ref(f64::from(v))).collect();
    within("gelu", &got, &want, (U, 2f64.powi(-20)));
    // A column-split tensor is fine for an elementwise op.
    let half: Vec<f32> = x.iter().map(|v| v * 0.5).collect();
    let got = run_kernel(SHAPE, cube_cols, &x, &|ctx, t| {
        let r = ctx.empty(t.shape, t.policy)?;
        ctx.write(&r, &half)?;
        residual_add(ctx, t, &r, &Placement::Owners)
    })
    .unwrap()
    .0;
    let want: Vec<f64> = x.iter().map(|&v| 1.5 * f64::from(v)).collect();
    within("residual_add", &got, &want, (U, 2f64.powi(-20)));
}

/// layer_norm_rows equals (x − mean)/√(var + ε)·γ + β in f64 within
/// 16u·(|ref| + 1): ten ops round once each, on values up to about the
/// normalized magnitude (the 1/cols factor, rounded to f16, adds one more).
#[test]
fn layer_norm_rows_matches_f64() {
    let (rows, cols) = SHAPE;
    let x = values(7, rows * cols, (-1.0, 3.0));
    let gamma = values(8, cols, (0.5, 1.5));
    let beta = values(9, cols, (-0.5, 0.5));
    let eps = 1e-5f32;
    let got = run_kernel(SHAPE, pe_rows, &x, &|ctx, t| {
        let cubes = ctx.sip_shape().0;
        let g = ctx.empty((1, t.shape.1), replicated(cubes))?;
        let b = ctx.empty((1, t.shape.1), replicated(cubes))?;
        ctx.write(&g, &gamma)?;
        ctx.write(&b, &beta)?;
        layer_norm_rows(ctx, t, (&g, &b), eps, &Placement::Owners)
    })
    .unwrap()
    .0;
    let want: Vec<f64> = x
        .chunks(cols)
        .flat_map(|r| {
            let r: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
            let mean = r.iter().sum::<f64>() / cols as f64;
            let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (var + f64::from(eps)).sqrt();
            let (g, b) = (&gamma, &beta);
            (0..cols).map(move |c| (r[c] - mean) * inv * f64::from(g[c]) + f64::from(b[c]))
        })
        .collect();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let bound = 16.0 * U * (w.abs() + 1.0);
        assert!((g - w).abs() <= bound, "layer_norm[{i}]: got {g}, want {w}");
    }
}

/// A row-wise op on a tensor whose rows are split over cubes column-wise is
/// refused naming the policy and the fix; so is a layer norm whose γ does
/// not lie on every cube of x.
#[test]
fn a_row_op_on_column_split_rows_names_the_policy_and_the_fix() {
    let x = values(10, SHAPE.0 * SHAPE.1, (-1.0, 1.0));
    let Err(e) = run_kernel(SHAPE, cube_cols, &x, &|ctx, t| {
        softmax_rows(ctx, t, &Placement::Owners)
    }) else {
        panic!("softmax_rows ran on column-split rows")
    };
    for want in [
        "softmax_rows: a row-wise op needs whole rows on each shard, and DPPolicy { cube: column_wise, pe: replicate, num_cubes: 2, num_pes: 1, replicas: false } splits the 40 columns",
        "(the shard at cube 0, pe 0 holds columns 0..20)",
        "allowed: cube and pe splits row_wise or replicate; lay x out by rows, e.g. DPPolicy::pe_rows or tp::replicated",
    ] {
        assert!(e.contains(want), "missing {want:?} in {e}");
    }
    let Err(e) = run_kernel(SHAPE, pe_rows, &x, &|ctx, t| {
        let split = ctx.empty((1, t.shape.1), cube_cols(ctx.sip_shape().0))?;
        layer_norm_rows(ctx, t, (&split, &split), 1e-5, &Placement::Owners)
    }) else {
        panic!("layer_norm_rows ran with a column-split gamma")
    };
    assert!(
        e.contains("layer_norm_rows: gamma is (1, 40) under DPPolicy { cube: column_wise, pe: replicate, num_cubes: 2, num_pes: 1, replicas: false }; allowed: a (1, 40) row with a whole copy on every cube holding x (cube 0); create it with tp::replicated"),
        "{e}"
    );
}
