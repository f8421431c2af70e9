//! Data types (f16, bf16, f32): every vector op and GEMM against an f64
//! reference within a per-dtype bound stated in units of the dtype's unit
//! roundoff u (2⁻¹¹, 2⁻⁸, 2⁻²⁴), f32 against f16 accumulation, bytes and
//! ticks per dtype, and the refusals of mixed dtypes.

use crate::common;
use kernbench::ccl::{CclConfig, ReduceOp};
use kernbench::dist::{DPPolicy, DistError, Rank, Tensor, init_process_group};
use kernbench::gemm::{Accumulate, Layout, Placement, matmul_with};
use kernbench::kernel::wiring::{QueueConfig, ring};
use kernbench::kernel::{Addr, DType, Tl};
use kernbench::machine::Machine;
use kernbench::ops::{cast_into, layer_norm_rows, softmax_rows};
use kernbench::seeded;
use kernbench::spec::System;
use kernbench::topology::address::{Location, Space};
use kernbench::tp::replicated;
use kernbench_systems::PeIdx;
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::{BinOp, MemLoc, Op, Place, QDir};
use std::sync::Mutex;

/// Lanes of the test PE's vector unit (16-bit lanes: 8 f32 elements a tick).
const LANES: u64 = 16;

/// One SIP of one PE, ideal links, `LANES` vector lanes; its TCM port moves
/// 64 B a tick after 10 ticks of latency, other memories are ideal.
fn one_pe() -> System {
    let mut s = common::lean_links(1, 64, 100).spec;
    s.pe.vector_lanes = LANES as u32;
    let tcm = &mut s.memory.tcm;
    (tcm.ideal, tcm.bandwidth_gbps, tcm.latency_ns) = (false, 64.0, 10.0);
    System::from_spec(s, "test").expect("test spec is valid")
}

/// The op a [`one_op`] launch runs on its tiles at TCM 0 (x), 256 KiB (y)
/// and 512 KiB (one scalar per row).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Which {
    Add,
    Sub,
    Mul,
    Max,
    Min,
    Scale,
    Copy,
    Exp,
    Gelu,
    Rsqrt,
    Recip,
    RowMax,
    RowSum,
    RowSub,
    RowMul,
    Cast(DType),
    Gemm,
}

const TCM_Y: u64 = 256 << 10;
const TCM_ROW: u64 = 512 << 10;
const TCM_OUT: u64 = 1 << 20;
const SCALE: f32 = 0.3;

/// One op of `which` on tiles of `dtype`: `elems` elements, rows of
/// `cols` (a GEMM: x is rows × cols, y is cols × cols); stores its result.
fn one_op(tl: &mut Tl, &(which, dtype, elems, cols): &(Which, DType, usize, usize)) {
    let x = tl.load_as(Addr::tcm(0), elems, dtype);
    let y = |tl: &mut Tl, n: usize| tl.load_as(Addr::tcm(TCM_Y), n, dtype);
    let per_row = |tl: &mut Tl| tl.load_as(Addr::tcm(TCM_ROW), elems / cols, dtype);
    let out = match which {
        Which::Add | Which::Sub | Which::Mul | Which::Max | Which::Min => {
            let y = y(tl, elems);
            match which {
                Which::Add => tl.add(x, y),
                Which::Sub => tl.sub(x, y),
                Which::Mul => tl.mul(x, y),
                Which::Max => tl.max(x, y),
                _ => tl.min(x, y),
            }
        }
        Which::Scale => tl.scale(x, SCALE),
        Which::Copy => tl.copy(x),
        Which::Exp => tl.exp(x),
        Which::Gelu => tl.gelu(x),
        Which::Rsqrt => tl.rsqrt(x, 0.0),
        Which::Recip => tl.recip(x),
        Which::RowMax => tl.row_max(x, cols),
        Which::RowSum => tl.row_sum(x, cols),
        Which::RowSub => {
            let s = per_row(tl);
            tl.row_sub(x, s, cols)
        }
        Which::RowMul => {
            let s = per_row(tl);
            tl.row_mul(x, s, cols)
        }
        Which::Cast(to) => tl.cast(x, to),
        Which::Gemm => {
            let y = y(tl, cols * cols);
            tl.gemm(x, y, elems / cols, cols, cols)
        }
    };
    tl.store(Addr::tcm(TCM_OUT), out);
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

/// What one op's run gave: its output, and (name, ticks, bytes) of every op.
struct Ran {
    out: Vec<f64>,
    ops: Vec<(&'static str, u64, u64)>,
}

/// The inputs of a run: x, y and the per-row scalars, each exact in its dtype.
struct Inputs {
    x: Vec<f32>,
    y: Vec<f32>,
    per_row: Vec<f32>,
}

/// `n` seeded values in [lo, hi), rounded to `dtype`; each draws on two
/// seeded f16 values, so an f32 value has all 24 bits of significand.
fn values(seed: u64, n: usize, (lo, hi): (f32, f32), dtype: DType) -> Vec<f32> {
    let fine = seeded::uniform(seed + 1000, n);
    seeded::uniform(seed, n)
        .into_iter()
        .zip(fine)
        .map(|(v, w)| {
            let unit = ((v + 1.0) / 2.0 + w * 2f32.powi(-12)).clamp(0.0, 1.0 - f32::EPSILON);
            dtype.round(lo + unit * (hi - lo))
        })
        .collect()
}

/// Runs `which` on `inputs` of `dtype` (rows of `cols`) on [`one_pe`].
fn run_op(which: Which, dtype: DType, inputs: &Inputs, cols: usize) -> Ran {
    let mut m = Machine::build_with(&one_pe(), DataMode::Functional).unwrap();
    m.write_as(tcm(0), dtype, &inputs.x).unwrap();
    m.write_as(tcm(TCM_Y), dtype, &inputs.y).unwrap();
    m.write_as(tcm(TCM_ROW), dtype, &inputs.per_row).unwrap();
    m.record_ops();
    let pe = m.pe_index(0, 0, 0);
    let elems = inputs.x.len();
    m.launch(one_op, &(which, dtype, elems, cols), &[pe])
        .unwrap();
    let (out_elems, out_dtype) = match which {
        Which::RowMax | Which::RowSum => (elems / cols, dtype),
        Which::Cast(to) => (elems, to),
        _ => (elems, dtype),
    };
    let out = m.read_as(tcm(TCM_OUT), out_elems, out_dtype).unwrap();
    Ran {
        out: out.into_iter().map(f64::from).collect(),
        ops: m
            .op_records()
            .iter()
            .map(|r| (r.op, r.end - r.start, r.bytes))
            .collect(),
    }
}

fn gelu_ref(x: f64) -> f64 {
    let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
    0.5 * x * (1.0 + inner.tanh())
}

/// The f64 value of `which` at element `i`, and the magnitude its error
/// is measured against (|value|, or the row's Σ|x| for a row sum).
fn reference(which: Which, inp: &Inputs, cols: usize, i: usize) -> (f64, f64) {
    let x = |i: usize| f64::from(inp.x[i]);
    let y = f64::from(inp.y[i]);
    let s = || f64::from(inp.per_row[i / cols]);
    let row = |i: usize| (i * cols..(i + 1) * cols).map(x);
    let v = match which {
        Which::Add => x(i) + y,
        Which::Sub => x(i) - y,
        Which::Mul => x(i) * y,
        Which::Max => x(i).max(y),
        Which::Min => x(i).min(y),
        Which::Scale => x(i) * f64::from(SCALE),
        Which::Copy | Which::Cast(_) => x(i),
        Which::Exp => x(i).exp(),
        Which::Gelu => gelu_ref(x(i)),
        Which::Rsqrt => 1.0 / x(i).sqrt(),
        Which::Recip => 1.0 / x(i),
        Which::RowMax => row(i).fold(f64::MIN, f64::max),
        Which::RowSum => return (row(i).sum(), row(i).map(f64::abs).sum()),
        Which::RowSub => x(i) - s(),
        Which::RowMul => x(i) * s(),
        Which::Gemm => unreachable!("GEMM references are computed whole"),
    };
    (v, v.abs())
}

/// The worst |got − want| / (u · (magnitude + 2⁻¹⁰)) over `got`: the error
/// in units of `dtype`'s unit roundoff (the 2⁻¹⁰ floor keeps results near
/// zero, f16 subnormals among them, from dividing by nothing).
fn worst_in_u(got: &[f64], want: &[(f64, f64)], dtype: DType) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, (w, mag))| (g - w).abs() / (dtype.unit_roundoff() * (mag + 2f64.powi(-10))))
        .fold(0.0, f64::max)
}

/// The inputs of `which`: positive where the function needs it.
fn inputs_for(which: Which, dtype: DType, n: usize, rows: usize) -> Inputs {
    let range = match which {
        Which::Rsqrt | Which::Recip => (0.25, 4.0),
        _ => (-2.0, 2.0),
    };
    Inputs {
        x: values(11, n, range, dtype),
        y: values(12, n, (-2.0, 2.0), dtype),
        per_row: values(13, rows, (0.5, 2.0), dtype),
    }
}

/// Bound of each vector op, in u of its dtype: the roundings it makes, plus
/// the f32 evaluation's error (a few units of 2⁻²⁴, which is u itself for
/// f32 data) scaled to u. `cols` f32 additions of a row sum err by up to
/// cols · 2⁻²⁴ of Σ|x|; GELU's 1 + tanh loses up to 22× where tanh nears
/// −1 on [−2, 2).
fn bound_in_u(which: Which, dtype: DType, cols: usize) -> f64 {
    let f32_units = 2f64.powi(-24) / dtype.unit_roundoff();
    match which {
        Which::Max | Which::Min | Which::Copy | Which::RowMax => 0.0,
        Which::Add | Which::Sub | Which::Mul | Which::RowSub | Which::RowMul => 1.0,
        Which::Scale => 2.0 + f32_units,
        Which::Cast(_) => 1.0,
        Which::Exp | Which::Rsqrt | Which::Recip => 1.0 + 4.0 * f32_units,
        Which::Gelu => 1.0 + 32.0 * f32_units,
        Which::RowSum => 1.0 + cols as f64 * f32_units,
        Which::Gemm => unreachable!("GEMM bounds are stated in their test"),
    }
}

/// The measured worst error of each op in u, [f16, bf16, f32], pinned just
/// above the measurement; each is within [`bound_in_u`].
const PINNED_WORST: [(Which, [f64; 3]); 15] = [
    (Which::Add, [1.00, 1.00, 0.91]),
    (Which::Sub, [1.00, 1.00, 0.90]),
    (Which::Mul, [0.96, 0.92, 0.88]),
    (Which::Max, [0.0, 0.0, 0.0]),
    (Which::Min, [0.0, 0.0, 0.0]),
    (Which::Scale, [1.17, 1.58, 0.89]),
    (Which::Copy, [0.0, 0.0, 0.0]),
    (Which::Exp, [0.91, 0.90, 0.91]),
    (Which::Gelu, [0.93, 0.98, 11.96]),
    (Which::Rsqrt, [0.96, 0.99, 1.39]),
    (Which::Recip, [0.98, 1.00, 0.94]),
    (Which::RowMax, [0.0, 0.0, 0.0]),
    (Which::RowSum, [0.11, 0.12, 0.32]),
    (Which::RowSub, [0.99, 0.98, 1.00]),
    (Which::RowMul, [0.99, 0.92, 0.92]),
];

/// Every elementwise and row op, in f16, bf16 and f32, equals the f64
/// function of its (exact) inputs within its bound in u of the dtype
/// ([`bound_in_u`]), and within the pinned measured worst below it.
#[test]
fn vector_ops_match_f64_within_their_bound_in_every_dtype() {
    let (rows, cols) = (6, 50);
    for (which, pinned) in PINNED_WORST {
        for (d, dtype) in DType::ALL.into_iter().enumerate() {
            let inp = inputs_for(which, dtype, rows * cols, rows);
            let ran = run_op(which, dtype, &inp, cols);
            let want: Vec<(f64, f64)> = (0..ran.out.len())
                .map(|i| reference(which, &inp, cols, i))
                .collect();
            let worst = worst_in_u(&ran.out, &want, dtype);
            let bound = bound_in_u(which, dtype, cols);
            assert!(
                pinned[d] <= bound,
                "{which:?} {dtype}: pinned above the bound"
            );
            assert!(
                worst <= pinned[d],
                "{which:?} {dtype}: {worst:.3} u > pinned {} u (bound {bound:.3} u)",
                pinned[d]
            );
        }
    }
}

/// A cast rounds once to the target (exact when widening): f32 → f16 and
/// → bf16 within u of the target, f16 → f32 exact.
#[test]
fn casts_round_once_to_the_target() {
    let (rows, cols) = (6, 50);
    for (from, to) in [
        (DType::F32, DType::F16),
        (DType::F32, DType::BF16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F16),
    ] {
        let inp = inputs_for(Which::Copy, from, rows * cols, rows);
        let ran = run_op(Which::Cast(to), from, &inp, cols);
        let want: Vec<(f64, f64)> = (0..ran.out.len())
            .map(|i| reference(Which::Cast(to), &inp, cols, i))
            .collect();
        let worst = worst_in_u(&ran.out, &want, to);
        let widening = to.unit_roundoff() < from.unit_roundoff();
        assert!(worst <= 1.0, "{from} -> {to}: {worst} u");
        assert_eq!(worst == 0.0, widening, "{from} -> {to}: {worst} u");
    }
}

/// The ticks of an op of `name` and the bytes it counted.
fn op_of(ran: &Ran, name: &str) -> (u64, u64) {
    let (_, ticks, bytes) = ran.ops.iter().find(|o| o.0 == name).expect("the op ran");
    (*ticks, *bytes)
}

/// Bytes are elements × the dtype's size: a TCM load or store of n
/// elements takes ⌈n·b/64⌉ + 10 ticks on the test port (64 B a tick, 10 of
/// latency); the vector unit's 16-bit lanes take 8 f32 elements a tick, so
/// an f32 pass, a row reduction's passes and a cast to or from f32 take
/// twice the f16 ticks; the MAC array takes f32 operands at a quarter rate.
#[test]
fn bytes_and_ticks_follow_the_dtype() {
    let (rows, cols) = (6u64, 50u64);
    let n = rows * cols;
    let macs_per_tick = one_pe().spec.pe.macs_per_tick;
    for dtype in DType::ALL {
        let (b, lanes) = (dtype.bytes(), LANES / dtype.lane_width());
        let inp = inputs_for(Which::Add, dtype, n as usize, rows as usize);
        let ran = run_op(Which::Add, dtype, &inp, cols as usize);
        let port = |bytes: u64| bytes.div_ceil(64) + 10;
        assert_eq!(op_of(&ran, "load"), (port(n * b), n * b), "{dtype} load");
        assert_eq!(op_of(&ran, "store"), (port(n * b), n * b), "{dtype} store");
        assert_eq!(
            op_of(&ran, "add"),
            (n.div_ceil(lanes), n * b),
            "{dtype} add"
        );
        let exp = run_op(Which::Exp, dtype, &inp, cols as usize);
        assert_eq!(op_of(&exp, "exp").0, 4 * n.div_ceil(lanes), "{dtype} exp");
        let sum = run_op(Which::RowSum, dtype, &inp, cols as usize);
        let tree =
            cols.div_ceil(lanes) + u64::from(cols.min(lanes).next_power_of_two().trailing_zeros());
        assert_eq!(op_of(&sum, "row_sum").0, rows * tree, "{dtype} row_sum");
        let gemm = run_op(Which::Gemm, dtype, &gemm_inputs(dtype, 6, 50), 50);
        let macs: u64 = 6 * 50 * 50 * if dtype == DType::F32 { 4 } else { 1 };
        assert_eq!(
            op_of(&gemm, "gemm").0,
            macs.div_ceil(macs_per_tick),
            "{dtype} gemm"
        );
    }
    // Pinned: f16 rows of 50 reduce in 6·(4 + 4), f32 in 6·(7 + 3) ticks.
    assert_eq!((50u64.div_ceil(16) + 4, 50u64.div_ceil(8) + 3), (8, 10));
    let f16 = inputs_for(Which::Copy, DType::F16, n as usize, rows as usize);
    let widen = run_op(Which::Cast(DType::F32), DType::F16, &f16, cols as usize);
    assert_eq!(op_of(&widen, "cast"), (n.div_ceil(8), n * 4), "f16 -> f32");
    let narrow = run_op(Which::Cast(DType::BF16), DType::F16, &f16, cols as usize);
    assert_eq!(
        op_of(&narrow, "cast"),
        (n.div_ceil(16), n * 2),
        "f16 -> bf16"
    );
}

/// x (m × k) and y (k × k) of `dtype` for a one-op GEMM.
fn gemm_inputs(dtype: DType, m: usize, k: usize) -> Inputs {
    Inputs {
        x: values(21, m * k, (-1.0, 1.0), dtype),
        y: values(22, k * k, (-1.0, 1.0), dtype),
        per_row: Vec::new(),
    }
}

/// The f64 product of row-major a (m × k) and b (k × n) and, per element,
/// Σ|a|·|b|: (value, magnitude) pairs.
fn gemm_ref(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let terms = (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]));
            out.push((terms.clone().sum(), terms.map(f64::abs).sum()));
        }
    }
    out
}

/// One MAC-array GEMM per dtype (products summed in f32, rounded once to
/// the operands' dtype) equals the f64 product within u·|C| + (k + 1)·2⁻²⁴
/// of Σ|a|·|b|, i.e. 1 + (k + 1)·2⁻²⁴/u units of u of Σ|a|·|b|.
#[test]
fn one_gemm_matches_f64_in_every_dtype() {
    let (m, k) = (6, 50);
    let mut worst = Vec::new();
    for dtype in DType::ALL {
        let inp = gemm_inputs(dtype, m, k);
        let ran = run_op(Which::Gemm, dtype, &inp, k);
        let w = worst_in_u(&ran.out, &gemm_ref(&inp.x, &inp.y, (m, k, k)), dtype);
        let bound = 1.0 + (k + 1) as f64 * 2f64.powi(-24) / dtype.unit_roundoff();
        assert!(w <= bound, "{dtype}: {w} u > {bound} u");
        worst.push(w);
    }
    // Measured against Σ|a|·|b| (several times |C|), pinned: [0.30, 0.38, 1.77] u.
    assert!(
        worst[0] < 0.30 && worst[1] < 0.38 && worst[2] < 1.77,
        "{worst:?}"
    );
}

/// One SIP of the default system whose TCM fits 32-wide GEMM tiles with
/// f32 operands and results (7 tiles of 32² f32: 28 KiB).
fn small_tcm_sip() -> System {
    common::system(|s| {
        s.system.sips.count = 1;
        s.memory.tcm.size_bytes = 28 << 10;
    })
}

/// C = A·B on one SIP with A, B and C of `dtype` (`Layout::spread`),
/// K-step partials summed as `acc` says: C as read back.
fn matmul_of(
    dtype: DType,
    (m, k, n): (usize, usize, usize),
    (a, b): (&[f32], &[f32]),
    acc: Accumulate,
) -> Vec<f32> {
    let sys = small_tcm_sip();
    let mode = DataMode::Functional;
    let mut pg =
        init_process_group(&sys, &CclConfig::embedded_default(), "pairwise", mode).unwrap();
    let out = Mutex::new(Vec::new());
    pg.spawn(1, |ctx| {
        let l = Layout::spread(m, n, 4, 2);
        let ta = ctx.empty_typed((m, k), l.a, dtype)?;
        let tb = ctx.empty_typed((k, n), l.b, dtype)?;
        let tc = ctx.empty_typed((m, n), l.c, dtype)?;
        ctx.write(&ta, a)?;
        ctx.write(&tb, b)?;
        let w = matmul_with(ctx, (&ta, &tb, &tc), &Placement::Owners, acc)?;
        ctx.wait(&w)?;
        *out.lock().unwrap() = ctx.read(&tc)?;
        Ok(())
    })
    .unwrap();
    out.into_inner().unwrap()
}

/// The tiled GEMM in every dtype (K = 300: ten 32-deep steps summed in
/// f32, rounded once to C's dtype) equals the f64 product within
/// 1 + (K + 2)·2⁻²⁴/u units of u of Σ|a|·|b|.
#[test]
fn tiled_gemm_matches_f64_in_every_dtype() {
    let (m, k, n) = (24, 300, 40);
    for dtype in DType::ALL {
        let a = values(31, m * k, (-1.0, 1.0), dtype);
        let b = values(32, k * n, (-1.0, 1.0), dtype);
        let got: Vec<f64> = matmul_of(dtype, (m, k, n), (&a, &b), Accumulate::F32)
            .into_iter()
            .map(f64::from)
            .collect();
        let w = worst_in_u(&got, &gemm_ref(&a, &b, (m, k, n)), dtype);
        let bound = 1.0 + (k + 2) as f64 * 2f64.powi(-24) / dtype.unit_roundoff();
        assert!(w <= bound && w > 0.0, "{dtype}: {w} u > {bound} u");
    }
}

/// The largest |C − C_f64| of an f16 GEMM of K = 2048 (64 steps of 32).
fn long_k_error(acc: Accumulate) -> f64 {
    let (m, k, n) = (16, 2048, 16);
    let a = values(41, m * k, (-1.0, 1.0), DType::F16);
    let b = values(42, k * n, (-1.0, 1.0), DType::F16);
    let got = matmul_of(DType::F16, (m, k, n), (&a, &b), acc);
    got.iter()
        .zip(gemm_ref(&a, &b, (m, k, n)))
        .map(|(&g, (w, _))| (f64::from(g) - w).abs())
        .fold(0.0, f64::max)
}

/// On a long K, f32 accumulation keeps one rounding (to f16 C) where f16
/// accumulation rounds each of 64 partial sums: both errors are of order
/// 10⁻² (measured 0.0136 and 0.068), f16 accumulation's five times f32's.
#[test]
fn f32_accumulation_beats_f16_on_a_long_k() {
    let (f32_err, f16_err) = (long_k_error(Accumulate::F32), long_k_error(Accumulate::F16));
    let order = |e: f64| e.log10().floor() as i32;
    assert_eq!(
        (order(f32_err), order(f16_err)),
        (-2, -2),
        "{f32_err} {f16_err}"
    );
    assert!(f16_err > 4.5 * f32_err, "{f32_err} {f16_err}");
}

/// One SIP of two cubes of the default system (8 PEs each).
fn two_cubes() -> System {
    common::system(|s| {
        s.system.sips.count = 1;
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (2, 1);
    })
}

/// What a kernel test runs on a rank's tensor of the dtype it is given.
type OnTensor<'a> = &'a (dyn Fn(&mut Rank, &Tensor) -> Result<(), DistError> + Sync);

/// Runs `body` on one rank of [`two_cubes`] with a (rows, cols) tensor of
/// `dtype` holding `x`, rows over the cubes and their PEs: the tensor's values after.
fn on_tensor(
    dtype: DType,
    (rows, cols): (usize, usize),
    x: &[f32],
    body: OnTensor,
) -> Result<Vec<f64>, String> {
    let mode = DataMode::Functional;
    let mut pg = init_process_group(
        &two_cubes(),
        &CclConfig::embedded_default(),
        "pairwise",
        mode,
    )
    .map_err(|e| e.to_string())?;
    let out = Mutex::new(Vec::new());
    pg.spawn(1, |ctx| {
        let cubes = ctx.sip_shape().0;
        let t = ctx.empty_typed((rows, cols), DPPolicy::pe_rows(cubes, 2), dtype)?;
        ctx.write(&t, x)?;
        body(ctx, &t)?;
        *out.lock().unwrap() = ctx.read(&t)?.into_iter().map(f64::from).collect();
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok(out.into_inner().unwrap())
}

/// Softmax over each row of 40 in every dtype equals the f64 softmax within
/// 8 + 40·2⁻²⁴/u units of u relative (six roundings, the shift's error
/// doubled by exp, and the f32 row sum); layer norm within
/// 16 + 2·40·2⁻²⁴/u units of u of (|ref| + 1), its two row sums in f32.
#[test]
fn softmax_and_layer_norm_match_f64_in_every_dtype() {
    let (rows, cols) = (24, 40);
    for dtype in DType::ALL {
        let f32_units = 2f64.powi(-24) / dtype.unit_roundoff();
        let x = values(51, rows * cols, (-1.0, 1.0), dtype);
        let got = on_tensor(dtype, (rows, cols), &x, &|ctx, t| {
            let w = softmax_rows(ctx, t, &Placement::Owners)?;
            ctx.wait(&w).map(|_| ())
        })
        .unwrap();
        let want: Vec<(f64, f64)> = x
            .chunks(cols)
            .flat_map(|r| {
                let max = r.iter().map(|&v| f64::from(v)).fold(f64::MIN, f64::max);
                let e: Vec<f64> = r.iter().map(|&v| (f64::from(v) - max).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| (v / s, v / s))
            })
            .collect();
        let worst = worst_in_u(&got, &want, dtype);
        assert!(
            worst <= 8.0 + 40.0 * f32_units,
            "softmax {dtype}: {worst} u"
        );

        let (gamma, beta) = (
            values(52, cols, (0.5, 1.5), dtype),
            values(53, cols, (-0.5, 0.5), dtype),
        );
        let got = on_tensor(dtype, (rows, cols), &x, &|ctx, t| {
            let cubes = ctx.sip_shape().0;
            let g = ctx.empty_typed((1, cols), replicated(cubes), dtype)?;
            let b = ctx.empty_typed((1, cols), replicated(cubes), dtype)?;
            ctx.write(&g, &gamma)?;
            ctx.write(&b, &beta)?;
            let w = layer_norm_rows(ctx, t, (&g, &b), 1e-5, &Placement::Owners)?;
            ctx.wait(&w).map(|_| ())
        })
        .unwrap();
        let want: Vec<(f64, f64)> = x
            .chunks(cols)
            .flat_map(|r| {
                let r: Vec<f64> = r.iter().map(|&v| f64::from(v)).collect();
                let mean = r.iter().sum::<f64>() / cols as f64;
                let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
                let inv = 1.0 / (var + 1e-5f32 as f64).sqrt();
                let (g, b) = (&gamma, &beta);
                (0..cols).map(move |c| {
                    let v = (r[c] - mean) * inv * f64::from(g[c]) + f64::from(b[c]);
                    (v, v.abs() + 1.0)
                })
            })
            .collect();
        let worst = worst_in_u(&got, &want, dtype);
        assert!(
            worst <= 16.0 + 80.0 * f32_units,
            "layer_norm {dtype}: {worst} u"
        );
    }
}

/// A tensor's shards take elements × its dtype's bytes; `write` rounds to
/// the dtype and `read` gives its values; `cast_into` rounds an f32
/// tensor into an f16 one of the same layout.
#[test]
fn tensors_hold_their_dtype_and_cast_into_another() {
    let fine = 1.0 + 2f32.powi(-20);
    let x = vec![fine; 48];
    let mut kept = Vec::new();
    for dtype in DType::ALL {
        let got = on_tensor(dtype, (4, 12), &x, &|_, t| {
            let bytes: u64 = t.shards.iter().map(|s| s.nbytes).sum();
            assert_eq!(
                (t.dtype, bytes, t.nbytes()),
                (dtype, 48 * dtype.bytes(), 48 * dtype.bytes())
            );
            Ok(())
        })
        .unwrap();
        kept.push(got[0]);
    }
    assert_eq!(kept, [1.0, 1.0, f64::from(fine)]);
    let got = on_tensor(DType::F32, (4, 12), &x, &|ctx, t| {
        let half = ctx.empty(t.shape, t.policy)?;
        let w = cast_into(ctx, t, &half, &Placement::Owners)?;
        ctx.wait(&w)?;
        assert_eq!(ctx.read(&half)?, vec![1.0; 48]);
        Ok(())
    })
    .unwrap();
    assert_eq!(got[0], f64::from(fine), "the f32 source is unchanged");
}

/// The error `body` fails with on one rank of [`two_cubes`] (a 4x12 f16 tensor).
fn refusal(body: OnTensor) -> String {
    on_tensor(DType::F16, (4, 12), &[0.5; 48], body).unwrap_err()
}

/// Mixed dtypes are refused with what is allowed and the fix: a collective
/// or a send of a non-f16 tensor, a matmul of f16 by f32, a traced GEMM or
/// add of two dtypes, a program whose registers differ at run time, and a
/// read of a tensor as another dtype.
#[test]
fn mixed_dtypes_are_refused_naming_the_fix() {
    let e = refusal(&|ctx, t| {
        let wide = ctx.empty_typed(t.shape, t.policy, DType::F32)?;
        ctx.all_reduce(&wide, ReduceOp::Sum).map(|_| ())
    });
    assert!(e.contains("all_reduce of rank 0's 4x12 f32 tensor: collectives and transfers move f16 data only; allowed: an f16 tensor; cast it first into an f16 tensor of the same layout (ops::cast_into, or tl.cast in a kernel)"), "{e}");
    let e = refusal(&|ctx, t| {
        let b = ctx.empty_typed(t.shape, t.policy, DType::BF16)?;
        ctx.isend(&b, 1).map(|_| ())
    });
    assert!(
        e.contains(
            "send of rank 0's 4x12 bf16 tensor: collectives and transfers move f16 data only"
        ),
        "{e}"
    );
    let e = refusal(&|ctx, t| {
        let b = ctx.empty_typed((12, 4), t.policy, DType::F32)?;
        let c = ctx.empty((4, 4), t.policy)?;
        matmul_with(ctx, (t, &b, &c), &Placement::Owners, Accumulate::F32).map(|_| ())
    });
    assert!(e.contains("matmul of A (4, 12) f16 and B (12, 4) f32: the MAC array takes operands of one dtype; allowed: A and B both f16, both bf16 or both f32 (cast one first with tl.cast)"), "{e}");

    let mut m = Machine::build_with(&one_pe(), DataMode::TimingOnly).unwrap();
    let pe = m.pe_index(0, 0, 0);
    let e = m.launch(mixed_gemm, &(), &[pe]).unwrap_err().to_string();
    assert!(e.contains("sip0.cube0.pe0: gemm: operands are f16 and f32; allowed: operands of one dtype (convert one with tl.cast)"), "{e}");
    // The engine checks too: registers loaded as two dtypes, then added.
    let load = |dst, offset, dtype| Op::Load {
        dst,
        src: Place::Fixed {
            loc: MemLoc {
                space: Space::Tcm,
                instance: MemLoc::LOCAL,
                offset,
            },
            elems: 8,
        },
        dtype,
    };
    let add = Op::Binary {
        op: BinOp::Add,
        dst: 2,
        a: 0,
        b: 1,
    };
    let ops = vec![load(0, 0, DType::BF16), load(1, 64, DType::F16), add];
    let e = common::program_error(&one_pe(), ops, 3);
    assert!(e.contains("add: operands are bf16 and f16; allowed: operands of one dtype (convert one with tl.cast)"), "{e}");

    let mut m = Machine::build_with(&one_pe(), DataMode::Functional).unwrap();
    m.write_as(tcm(0), DType::F32, &[1.5; 4]).unwrap();
    let e = m.read_as(tcm(0), 4, DType::F16).unwrap_err();
    assert_eq!(
        e,
        "read of 4 f16 elements at tcm 0+0x0: the tensor at +0x0 holds f32; read it as f32 (or cast it)"
    );
}

/// A GEMM of an f16 tile by an f32 one.
fn mixed_gemm(tl: &mut Tl, _: &()) {
    let a = tl.load_as(Addr::tcm(0), 4, DType::F16);
    let b = tl.load_as(Addr::tcm(64), 4, DType::F32);
    tl.gemm(a, b, 2, 2, 2);
}

/// PE 0 sends `elems` of `dtype` east; PE 1 receives and stores them.
fn send_typed(tl: &mut Tl, &(elems, dtype): &(usize, DType)) {
    if tl.program_id(0) == 0 {
        let x = tl.load_as(Addr::tcm(0), elems, dtype);
        tl.send(QDir::E, x);
    } else {
        let y = tl.recv(QDir::W, &[elems], dtype);
        tl.store(Addr::tcm(0), y);
    }
}

/// A send of `elems` of `dtype` between two SIPs of one PE (64 B a tick,
/// latency 100) over 4 slots of `slot` bytes: (send start to recv end, the
/// recv's bytes, the received values), or the run's error.
fn transfer(elems: usize, dtype: DType, slot: u64) -> Result<(u64, u64, Vec<f32>), String> {
    let mut m = Machine::build_with(&common::lean_links(2, 64, 100), DataMode::Functional).unwrap();
    m.record_ops();
    let q = QueueConfig {
        buffer: Space::Tcm,
        n_slots: 4,
        slot_size: slot,
    };
    m.install(ring(&[PeIdx(0), PeIdx(1)], QDir::E, q).unwrap())
        .unwrap();
    let x = values(61, elems, (-1.0, 1.0), dtype);
    let at = |sip| Location { sip, ..tcm(0) };
    m.write_as(at(0), dtype, &x).unwrap();
    let pes = [PeIdx(0), PeIdx(1)];
    m.launch(send_typed, &(elems, dtype), &pes)
        .map_err(|e| e.to_string())?;
    let log = m.op_records();
    let send = log.iter().find(|r| r.op == "send").unwrap();
    let recv = log.iter().find(|r| r.op == "recv").unwrap();
    let got = m.read_as(at(1), elems, dtype).unwrap();
    assert_eq!(got, x, "{dtype}: values arrive unchanged");
    Ok((recv.end - send.start, recv.bytes, got))
}

/// A transfer of n f32 elements moves 4n bytes: it takes exactly the ticks
/// of 2n f16 elements on the same queues; on slots of 4k + 2 bytes each
/// chunk carries 4k; slots smaller than an f32 are refused naming the fix.
#[test]
fn transfers_move_elements_times_dtype_bytes() {
    let (f32_ticks, f32_bytes, _) = transfer(300, DType::F32, 256).unwrap();
    let (f16_ticks, f16_bytes, _) = transfer(600, DType::F16, 256).unwrap();
    let (bf16_ticks, bf16_bytes, _) = transfer(300, DType::BF16, 256).unwrap();
    assert_eq!((f32_bytes, f16_bytes, bf16_bytes), (1200, 1200, 600));
    assert_eq!(f32_ticks, f16_ticks);
    assert!(bf16_ticks < f32_ticks, "{bf16_ticks} {f32_ticks}");
    // Slots of 6 bytes carry one f32 (4 bytes) a chunk, as slots of 4 do.
    let six = transfer(10, DType::F32, 6).unwrap();
    let four = transfer(10, DType::F32, 4).unwrap();
    assert_eq!((six.0, six.1), (four.0, 40));
    let e = transfer(10, DType::F32, 2).unwrap_err();
    assert!(e.contains("send of f32 on E: its slots of 2 bytes hold no f32 element; allowed: slot_size of at least 4 bytes"), "{e}");
}
