//! A GPT layer under Megatron TP (and SP), forward and backward, against an
//! f64 reference written here; its link volumes, FLOPs and refusals.

use crate::common;
use kernbench::ccl::CclConfig;
use kernbench::dist::{DistError, ProcessGroup, Rank, init_process_group};
use kernbench::spec::System;
use kernbench::systems::memory::DataMode;
use kernbench::tp::{ModelParallel, initialize_model_parallel};
use kernbench::transformer::{FullWeights, LayerShape, LayerStack, TpOptions};
use std::sync::Mutex;

/// h 32, 8 heads of 4, MLP 64, 2 sequences of 8: 16 tokens.
const SHAPE: LayerShape = LayerShape {
    hidden: 32,
    heads: 8,
    ffn_hidden: 64,
    seq: 8,
    micro_batch: 2,
};

/// `n` SIPs on a ring, each of two cubes.
fn sips(n: u32) -> System {
    common::system(|s| {
        s.system.sips.count = n;
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (2, 1);
    })
}

/// A process group on `sys` (ring collectives) in TP groups of `tp`.
fn tp_groups(sys: &System, tp: u32, mode: DataMode) -> (ProcessGroup, ModelParallel) {
    let mut pg = init_process_group(sys, &CclConfig::embedded_default(), "ring", mode).unwrap();
    let mp = initialize_model_parallel(&mut pg, tp).unwrap();
    (pg, mp)
}

type M = Vec<f64>;

/// The link class of inter-SIP links (noc, ucie, inter_sip, pcie).
const INTER_SIP: u8 = 2;

/// (m, k) · (k, n).
fn mm(a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize)) -> M {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

/// The (cols, rows) transpose of a (rows, cols) matrix.
fn tr(a: &[f64], rows: usize, cols: usize) -> M {
    (0..cols * rows)
        .map(|i| a[(i % rows) * cols + i / rows])
        .collect()
}

fn f64s(v: &[f32]) -> M {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// Layer norm of each row: (out, x̂, 1/σ per row).
fn ln(x: &[f64], g: &[f64], b: &[f64], h: usize) -> (M, M, M) {
    let (mut out, mut xh, mut inv) = (vec![], vec![], vec![]);
    for r in x.chunks(h) {
        let mean = r.iter().sum::<f64>() / h as f64;
        let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
        let is = 1.0 / (var + 1e-5).sqrt();
        for (j, v) in r.iter().enumerate() {
            xh.push((v - mean) * is);
            out.push((v - mean) * is * g[j] + b[j]);
        }
        inv.push(is);
    }
    (out, xh, inv)
}

/// Layer norm's backward: (dx, dγ, dβ).
fn ln_back(dz: &[f64], xh: &[f64], inv: &[f64], g: &[f64], h: usize) -> (M, M, M) {
    let (mut dx, mut dg, mut db) = (vec![], vec![0.0; h], vec![0.0; h]);
    for (r, is) in inv.iter().enumerate() {
        let row = |v: &[f64], j: usize| v[r * h + j];
        let dxh: Vec<f64> = (0..h).map(|j| row(dz, j) * g[j]).collect();
        let m1 = dxh.iter().sum::<f64>() / h as f64;
        let m2 = (0..h).map(|j| dxh[j] * row(xh, j)).sum::<f64>() / h as f64;
        for j in 0..h {
            dx.push(is * (dxh[j] - m1 - row(xh, j) * m2));
            dg[j] += row(dz, j) * row(xh, j);
            db[j] += row(dz, j);
        }
    }
    (dx, dg, db)
}

fn gelu(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
    0.5 * x * (1.0 + u.tanh())
}

fn gelu_grad(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let t = (c * (x + 0.044715 * x.powi(3))).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
}

/// The reference's results: y, dx and the whole gradients (q, k, v, out,
/// fc1, fc2, ln1 γ, ln1 β, ln2 γ, ln2 β), in f64.
struct Reference {
    y: M,
    dx: M,
    grads: Vec<M>,
}

/// The reference's sizes: (h, heads, s, b, d).
fn dims() -> (usize, usize, usize, usize, usize) {
    let LayerShape {
        hidden: h,
        heads,
        seq: s,
        micro_batch: bsz,
        ..
    } = SHAPE;
    (h, heads, s, bsz, h / heads)
}

/// Element e of head hd of token i of sequence b of a (tokens, h) matrix.
fn at(m: &[f64], b: usize, i: usize, hd: usize, e: usize) -> f64 {
    let (h, _, s, _, d) = dims();
    m[(b * s + i) * h + hd * d + e]
}

/// Causal attention in f64: the softmax of every (sequence, head), and ctx.
fn attention(q: &[f64], k: &[f64], v: &[f64]) -> (Vec<M>, M) {
    let (h, heads, s, bsz, d) = dims();
    let t = bsz * s;
    let mut probs = vec![vec![0.0; s * s]; bsz * heads];
    let mut ctx = vec![0.0; t * h];
    for b in 0..bsz {
        for hd in 0..heads {
            let pr = &mut probs[b * heads + hd];
            for i in 0..s {
                let sc: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..d)
                            .map(|e| at(q, b, i, hd, e) * at(k, b, j, hd, e))
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let mx = sc.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = sc.iter().map(|v| (v - mx).exp()).sum();
                for j in 0..=i {
                    pr[i * s + j] = (sc[j] - mx).exp() / z;
                }
                for e in 0..d {
                    ctx[(b * s + i) * h + hd * d + e] =
                        (0..=i).map(|j| pr[i * s + j] * at(v, b, j, hd, e)).sum();
                }
            }
        }
    }
    (probs, ctx)
}

/// Causal attention's backward in f64: ∂Q, ∂K, ∂V from ∂ctx.
fn attention_back(probs: &[M], dctx: &[f64], (q, k, v): (&[f64], &[f64], &[f64])) -> [M; 3] {
    let (h, heads, s, bsz, d) = dims();
    let t = bsz * s;
    let (mut dq, mut dk, mut dv) = (vec![0.0; t * h], vec![0.0; t * h], vec![0.0; t * h]);
    for b in 0..bsz {
        for hd in 0..heads {
            let pr = &probs[b * heads + hd];
            for i in 0..s {
                let dp: Vec<f64> = (0..s)
                    .map(|j| {
                        (0..d)
                            .map(|e| at(dctx, b, i, hd, e) * at(v, b, j, hd, e))
                            .sum()
                    })
                    .collect();
                let dot: f64 = (0..s).map(|j| dp[j] * pr[i * s + j]).sum();
                for j in 0..s {
                    let ds = pr[i * s + j] * (dp[j] - dot) / (d as f64).sqrt();
                    for e in 0..d {
                        let (ri, rj) = ((b * s + i) * h + hd * d + e, (b * s + j) * h + hd * d + e);
                        dv[rj] += pr[i * s + j] * dctx[ri];
                        dq[ri] += ds * k[rj];
                        dk[rj] += ds * q[ri];
                    }
                }
            }
        }
    }
    [dq, dk, dv]
}

/// The layer in f64 on the whole weights: forward of `x`, backward of `dy`.
fn reference(w: &FullWeights, x: &[f64], dy: &[f64]) -> Reference {
    let (h, f, t) = (
        SHAPE.hidden,
        SHAPE.ffn_hidden,
        SHAPE.seq * SHAPE.micro_batch,
    );
    let p = |v: &[f32]| f64s(v);
    let (wq, wk, wv, wo, w1, w2) = (p(&w.q), p(&w.k), p(&w.v), p(&w.out), p(&w.fc1), p(&w.fc2));
    let (g1, b1, g2, b2) = (p(&w.ln1.0), p(&w.ln1.1), p(&w.ln2.0), p(&w.ln2.1));
    let (a1, xh1, inv1) = ln(x, &g1, &b1, h);
    let (q, k, v) = (
        mm(&a1, &wq, (t, h, h)),
        mm(&a1, &wk, (t, h, h)),
        mm(&a1, &wv, (t, h, h)),
    );
    let (probs, ctx) = attention(&q, &k, &v);
    let h1: M = mm(&ctx, &wo, (t, h, h))
        .iter()
        .zip(x)
        .map(|(a, b)| a + b)
        .collect();
    let (a2, xh2, inv2) = ln(&h1, &g2, &b2, h);
    let f1 = mm(&a2, &w1, (t, h, f));
    let g: M = f1.iter().map(|&v| gelu(v)).collect();
    let y: M = mm(&g, &w2, (t, f, h))
        .iter()
        .zip(&h1)
        .map(|(a, b)| a + b)
        .collect();
    // Backward.
    let dw2 = mm(&tr(&g, t, f), dy, (f, t, h));
    let dg = mm(dy, &tr(&w2, f, h), (t, h, f));
    let df1: M = dg.iter().zip(&f1).map(|(a, &v)| a * gelu_grad(v)).collect();
    let dw1 = mm(&tr(&a2, t, h), &df1, (h, t, f));
    let da2 = mm(&df1, &tr(&w1, h, f), (t, f, h));
    let (dln2, dg2, db2) = ln_back(&da2, &xh2, &inv2, &g2, h);
    let dh1: M = dln2.iter().zip(dy).map(|(a, b)| a + b).collect();
    let dwo = mm(&tr(&ctx, t, h), &dh1, (h, t, h));
    let dctx = mm(&dh1, &tr(&wo, h, h), (t, h, h));
    let [dq, dk, dv] = attention_back(&probs, &dctx, (&q, &k, &v));
    let a1t = tr(&a1, t, h);
    let (dwq, dwk, dwv) = (
        mm(&a1t, &dq, (h, t, h)),
        mm(&a1t, &dk, (h, t, h)),
        mm(&a1t, &dv, (h, t, h)),
    );
    let da1: M = [(&dq, &wq), (&dk, &wk), (&dv, &wv)]
        .iter()
        .map(|(dm, wm)| mm(dm, &tr(wm, h, h), (t, h, h)))
        .fold(vec![0.0; t * h], |acc, m| {
            acc.iter().zip(&m).map(|(a, b)| a + b).collect()
        });
    let (dln1, dg1, db1) = ln_back(&da1, &xh1, &inv1, &g1, h);
    let dx: M = dln1.iter().zip(&dh1).map(|(a, b)| a + b).collect();
    Reference {
        y,
        dx,
        grads: vec![dwq, dwk, dwv, dwo, dw1, dw2, dg1, db1, dg2, db2],
    }
}

/// The global token of row `i` of TP rank `r`'s rows (of `tp`, SP or not)
/// on SIPs of `cubes` cubes: under SP, in each cube's block the r-th run.
fn token(i: usize, r: usize, (tp, sp): (usize, bool), cubes: usize) -> usize {
    let t = SHAPE.seq * SHAPE.micro_batch;
    if !sp {
        return i;
    }
    let run = t / (cubes * tp);
    (i / run) * (t / cubes) + r * run + i % run
}

/// What one rank hands back: its rows of y and dx, and its gradients.
struct RankOut {
    rank: usize,
    y: Vec<f32>,
    dx: Vec<f32>,
    grads: Vec<Vec<f32>>,
    flops: u64,
    forward_flops: u64,
}

/// One layer at TP `tp` (SP or not) on `tp` SIPs, functional: forward of
/// `micros` micro-batches of the same input (one when 0), then (unless 0)
/// their backward, last first. Every rank's results (y of the last
/// forward, dx of the last backward) and the inter-SIP link bytes.
fn run(tp: u32, opts: TpOptions, micros: usize) -> (Vec<RankOut>, u64) {
    let backward = micros > 0;
    let sys = sips(tp);
    let (mut pg, mp) = tp_groups(&sys, tp, DataMode::Functional);
    let (t, h) = (SHAPE.seq * SHAPE.micro_batch, SHAPE.hidden);
    let x = kernbench::tp::seeded_matrix(7, t, h);
    let dy = kernbench::tp::seeded_matrix(8, t, h);
    let out = Mutex::new(Vec::new());
    pg.spawn(tp, |ctx: &mut Rank| -> Result<(), DistError> {
        let mut stack = LayerStack::new(ctx, SHAPE, 1, mp.clone(), opts, 3)?;
        let r = ctx.rank() as usize;
        let xin = stack.activation(ctx)?;
        let rows = xin.shape.0;
        let pick = |m: &[f32]| -> Vec<f32> {
            (0..rows)
                .flat_map(|i| {
                    let g = token(i, r, (tp as usize, opts.sequence_parallel), 2);
                    m[g * h..(g + 1) * h].to_vec()
                })
                .collect()
        };
        ctx.write(&xin, &pick(&x))?;
        let mut yv = Vec::new();
        for micro in 0..micros.max(1) {
            let y = stack.forward(ctx, micro, &xin)?;
            yv = ctx.read(&y)?;
        }
        let dyt = stack.activation(ctx)?;
        ctx.write(&dyt, &pick(&dy))?;
        let mut dxv = Vec::new();
        for micro in (0..micros).rev() {
            let dx = stack.backward(ctx, micro, &dyt)?;
            dxv = ctx.read(&dx)?;
        }
        let grads = match backward {
            true => stack
                .grads()
                .iter()
                .map(|g| ctx.read(g))
                .collect::<Result<_, _>>()?,
            false => Vec::new(),
        };
        out.lock().unwrap().push(RankOut {
            rank: r,
            y: yv,
            dx: dxv,
            grads,
            flops: stack.issued_forward_flops(),
            forward_flops: stack.forward_flops(),
        });
        Ok(())
    })
    .unwrap();
    let mut v = out.into_inner().unwrap();
    v.sort_by_key(|o| o.rank);
    let links = pg.machine.engine.links();
    let inter_sip = links
        .ids()
        .filter(|&l| links.class_index(l) == INTER_SIP)
        .map(|l| links.stats(l).bytes)
        .sum();
    (v, inter_sip)
}

/// The worst |got − want| over max |want| of each result, in the
/// reference's order: y, dx, then the gradients.
fn errors(tp: u32, sp: bool) -> Vec<f64> {
    let (ranks, _) = run(
        tp,
        TpOptions {
            sequence_parallel: sp,
            recompute: false,
        },
        1,
    );
    let (t, h, f) = (
        SHAPE.seq * SHAPE.micro_batch,
        SHAPE.hidden,
        SHAPE.ffn_hidden,
    );
    let (tp, d) = (tp as usize, h / SHAPE.heads);
    let hl = SHAPE.heads / tp;
    let w = FullWeights::seeded(&SHAPE, 3, 0);
    let x = f64s(&kernbench::tp::seeded_matrix(7, t, h));
    let dy = f64s(&kernbench::tp::seeded_matrix(8, t, h));
    let want = reference(&w, &x, &dy);
    let (mut y, mut dx) = (vec![0.0; t * h], vec![0.0; t * h]);
    let mut grads: Vec<M> = want.grads.iter().map(|g| vec![0.0; g.len()]).collect();
    for o in &ranks {
        let r = o.rank;
        for i in 0..o.y.len() / h {
            let g = token(i, r, (tp, sp), 2);
            for j in 0..h {
                y[g * h + j] = f64::from(o.y[i * h + j]);
                dx[g * h + j] = f64::from(o.dx[i * h + j]);
            }
        }
        // grads(): fc2, fc1, ln2 γ, β, out, qkv (the local heads' Q, then K, then V columns), ln1 γ, β.
        let gr = |i: usize| f64s(&o.grads[i]);
        let mut put_rows = |which: usize, m: M, first: usize| {
            grads[which][first * h..first * h + m.len()].copy_from_slice(&m);
        };
        put_rows(5, gr(0), r * f / tp);
        put_rows(3, gr(4), r * h / tp);
        let mut put_cols = |which: usize, m: M, width: usize, first: usize, cols: usize| {
            for (i, row) in m.chunks(cols).enumerate() {
                grads[which][i * width + first..i * width + first + cols].copy_from_slice(row);
            }
        };
        put_cols(4, gr(1), f, r * f / tp, f / tp);
        let qkv = gr(5);
        for (part, which) in [0, 1, 2].into_iter().enumerate() {
            let cols: M = qkv
                .chunks(3 * hl * d)
                .flat_map(|row| &row[part * hl * d..(part + 1) * hl * d])
                .copied()
                .collect();
            put_cols(which, cols, h, r * hl * d, hl * d);
        }
        let n = o.grads.len();
        for (which, i) in [(8, 2), (9, 3), (6, n - 2), (7, n - 1)] {
            let add = gr(i);
            if sp || r == 0 {
                for (a, b) in grads[which].iter_mut().zip(&add) {
                    *a += b;
                }
            }
        }
    }
    let err = |got: &[f64], want: &[f64]| {
        let top = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        got.iter()
            .zip(want)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
            / top
    };
    let mut out = vec![err(&y, &want.y), err(&dx, &want.dx)];
    out.extend(grads.iter().zip(&want.grads).map(|(g, w)| err(g, w)));
    out
}

/// Recomputing activations in backward re-runs the same ops on the same
/// input: y, dx and every gradient are bit-identical to keeping them; two
/// micro-batches of the same data accumulate exactly twice each gradient
/// (a doubling is exact in f16).
#[test]
fn recompute_changes_no_value_and_micro_batches_accumulate() {
    for sp in [false, true] {
        let kept = TpOptions {
            sequence_parallel: sp,
            recompute: false,
        };
        let (one, _) = run(2, kept, 1);
        let (two, _) = run(
            2,
            TpOptions {
                recompute: true,
                ..kept
            },
            2,
        );
        for (a, b) in one.iter().zip(&two) {
            assert_eq!((&a.y, &a.dx), (&b.y, &b.dx), "sp {sp}");
            for (ga, gb) in a.grads.iter().zip(&b.grads) {
                let doubled: Vec<f32> = ga.iter().map(|v| 2.0 * v).collect();
                assert_eq!(&doubled, gb, "sp {sp}");
            }
        }
    }
}

/// The bound every result keeps against the f64 reference: f16 storage
/// between ops and f16 folds of GEMM partial sums, relative to the
/// result's largest magnitude (2⁻⁸: a few f16 roundings of 2⁻¹¹ through
/// the layer's chain of ops).
const BOUND: f64 = 1.0 / 256.0;

#[test]
fn one_layer_at_tp_1_2_4_8_with_and_without_sp_matches_f64() {
    let mut worst = 0.0f64;
    for (tp, sp) in [
        (1, false),
        (2, false),
        (2, true),
        (4, false),
        (4, true),
        (8, false),
        (8, true),
    ] {
        let e = errors(tp, sp);
        eprintln!("tp {tp} sp {sp}: {e:?}");
        assert!(e.iter().all(|&v| v < BOUND), "tp {tp} sp {sp}: {e:?}");
        worst = e.iter().fold(worst, |m, &v| m.max(v));
    }
    // Measured: the worst is the Q gradient at TP 8 with SP (GEMMs
    // accumulate in f32; with f16 accumulation it was 0.001661).
    assert_eq!(format!("{worst:.6}"), "0.001791");
}

/// Megatron's per-layer volume on the inter-SIP links of a ring of `tp`
/// SIPs of `cubes` cubes, ring algorithm, each piece one slot: two
/// all-reduces of N = b·s·h elements (2 B each) per pass, each 2(t − 1)·N
/// elements over all links, plus a credit of `credit` bytes per piece sent
/// (2(t − 1) steps × t ranks × one lane per cube). Under SP an all-gather
/// and a reduce-scatter move (t − 1)·N each: the same total.
fn volume(tp: u64, cubes: u64, credit: u64) -> u64 {
    let n = (SHAPE.seq * SHAPE.micro_batch * SHAPE.hidden) as u64;
    2 * (2 * (tp - 1) * n * 2 + 2 * (tp - 1) * tp * cubes * credit)
}

#[test]
fn link_volumes_per_layer_are_megatrons() {
    let credit = sips(2).spec.control.credit_bytes;
    for tp in [2u32, 4, 8] {
        for sp in [false, true] {
            let o = TpOptions {
                sequence_parallel: sp,
                recompute: false,
            };
            let (_, forward) = run(tp, o, 0);
            let (_, both) = run(tp, o, 1);
            let want = volume(u64::from(tp), 2, credit);
            assert_eq!((forward, both - forward), (want, want), "tp {tp} sp {sp}");
        }
    }
    // TP 2: 2 all-reduces × 2·1·512 elements × 2 B + 16 credits of 16 B.
    assert_eq!(volume(2, 2, 16), 4352);
}

#[test]
fn forward_flops_are_megatrons_count() {
    let (ranks, _) = run(2, TpOptions::default(), 0);
    let issued: u64 = ranks.iter().map(|o| o.flops).sum();
    let (b, s, h, f) = (2u64, 8u64, 32u64, 64u64);
    // QKV 6bsh², scores and ·V 4bs²h, out-proj 2bsh², MLP 4bshf: with
    // f = 4h, Megatron's 24·b·s·h²·(1 + s/(6h)); here f = 2h.
    assert_eq!(
        issued,
        8 * b * s * h * h + 4 * b * s * s * h + 4 * b * s * h * f
    );
    assert_eq!(issued, 278_528);
    assert_eq!(ranks[0].forward_flops, issued);
    // At f = 4h (timing only, 2 layers at TP 2 with SP): Megatron's
    // 24·b·s·h²·(1 + s/(6h)) per layer, from the GEMMs the ranks issued.
    let shape = LayerShape {
        ffn_hidden: 4 * SHAPE.hidden,
        ..SHAPE
    };
    let (mut pg, mp) = tp_groups(&sips(2), 2, DataMode::TimingOnly);
    let sums = Mutex::new((0, 0));
    let opts = TpOptions {
        sequence_parallel: true,
        recompute: false,
    };
    pg.spawn(2, |ctx: &mut Rank| -> Result<(), DistError> {
        let mut stack = LayerStack::new(ctx, shape, 2, mp.clone(), opts, 0)?;
        let x = stack.activation(ctx)?;
        stack.forward(ctx, 0, &x)?;
        let mut s = sums.lock().unwrap();
        (s.0, s.1) = (s.0 + stack.issued_forward_flops(), stack.forward_flops());
        Ok(())
    })
    .unwrap();
    let megatron = 2 * 24 * b * s * h * h * (6 * h + s) / (6 * h);
    assert_eq!(sums.into_inner().unwrap(), (megatron, megatron));
    assert_eq!(megatron, 819_200);
}

/// The error `LayerStack::new` gives for `shape` at TP `tp` (SP or not).
fn refusal(shape: LayerShape, tp: u32, sp: bool) -> String {
    let sys = sips(tp);
    let (mut pg, mp) = tp_groups(&sys, tp, DataMode::TimingOnly);
    let opts = TpOptions {
        sequence_parallel: sp,
        recompute: false,
    };
    let e = pg
        .spawn(tp, |ctx: &mut Rank| {
            LayerStack::new(ctx, shape, 1, mp.clone(), opts, 0).map(|_| ())
        })
        .unwrap_err();
    e.to_string()
}

#[test]
fn a_shape_the_tp_group_cannot_split_is_refused_naming_the_field() {
    let e = refusal(
        LayerShape {
            hidden: 48,
            heads: 6,
            ..SHAPE
        },
        4,
        false,
    );
    assert!(
        e.contains("heads 6 is not divisible by the TP size 4; allowed: heads a multiple of 4"),
        "{e}"
    );
    let e = refusal(LayerShape { heads: 5, ..SHAPE }, 1, false);
    assert!(
        e.contains("hidden 32 is not divisible by heads 5; allowed: heads dividing hidden"),
        "{e}"
    );
    let e = refusal(
        LayerShape {
            seq: 6,
            micro_batch: 2,
            ..SHAPE
        },
        4,
        true,
    );
    assert!(e.contains("seq 6 × micro_batch 2 = 12 tokens is not divisible by 8, the TP size 4 × the 2 cubes of a SIP"), "{e}");
}

/// The forward's simulated ticks at TP 1 on one SIP of one cube of one PE
/// with ideal memories and links (`common::lean_links`): the launches run
/// one after another on the compute stream, each one launch latency after
/// the one before ends, so the time is Σ (launch latency + kernel). The
/// forward is 57 launches: LN1, the fused QKV projection, 3 per
/// (sequence, head) (Q·Kᵀ, scale-mask-softmax, ·V: 48), the output
/// projection, the residual, LN2, fc1, GELU, fc2 and the residual; each
/// launch costs `pe.launch_overhead_ns` = 100 ticks (PCIe ideal), 5,700 in
/// all. The MAC array needs Σ m·n·k / macs_per_tick = 139,264 / 1,024 =
/// 136 ticks of the remaining 1,836; the vector kernels (rows of 32 to 64
/// on 256 lanes: tree levels dominate) and the loads make up the rest.
#[test]
fn forward_time_at_tp1_is_pinned() {
    let sys = common::lean_links(1, 64, 100);
    let macs = sys.spec.pe.macs_per_tick;
    let (mut pg, mp) = tp_groups(&sys, 1, DataMode::TimingOnly);
    let ticks = Mutex::new(0);
    pg.spawn(1, |ctx: &mut Rank| -> Result<(), DistError> {
        let mut stack = LayerStack::new(ctx, SHAPE, 1, mp.clone(), TpOptions::default(), 0)?;
        let x = stack.activation(ctx)?;
        let t0 = ctx.now();
        stack.forward(ctx, 0, &x)?;
        *ticks.lock().unwrap() = ctx.now() - t0;
        assert_eq!(stack.issued_forward_flops() / 2, 139_264);
        Ok(())
    })
    .unwrap();
    let ticks = ticks.into_inner().unwrap();
    assert!(ticks >= 57 * 100 + 139_264 / macs, "{ticks}");
    assert_eq!(ticks, 7_536);
}

/// A stack of no layers, an input of the wrong layout, a backward without
/// its forward and a micro-batch run forward twice are refused, each
/// naming what is allowed.
#[test]
fn misuse_of_a_stack_is_refused_naming_the_fix() {
    let sys = sips(2);
    let (mut pg, mp) = tp_groups(&sys, 2, DataMode::TimingOnly);
    let sp = TpOptions {
        sequence_parallel: true,
        recompute: false,
    };
    let errs = Mutex::new(Vec::new());
    pg.spawn(2, |ctx: &mut Rank| -> Result<(), DistError> {
        let mut e = Vec::new();
        e.push(LayerStack::new(ctx, SHAPE, 0, mp.clone(), sp, 0).err());
        let mut stack = LayerStack::new(ctx, SHAPE, 1, mp.clone(), sp, 0)?;
        let whole = ctx.empty((16, 32), kernbench::dist::DPPolicy::cube_rows(2))?;
        e.push(stack.forward(ctx, 0, &whole).err());
        let x = stack.activation(ctx)?;
        e.push(stack.backward(ctx, 3, &x).err());
        stack.forward(ctx, 0, &x)?;
        e.push(stack.forward(ctx, 0, &x).err());
        let msgs = e
            .into_iter()
            .map(|e| e.map(|e| e.to_string()).unwrap_or_default());
        errs.lock().unwrap().extend(msgs);
        Ok(())
    })
    .unwrap();
    let errs = errs.into_inner().unwrap();
    let want = [
        "LayerStack: layers is 0; allowed: at least 1 layer per stack",
        "LayerStack.forward: the tensor is (16, 32) under DPPolicy { cube: row_wise, pe: replicate, num_cubes: 2, num_pes: 1, replicas: false }; allowed: (8, 32) under",
        "LayerStack.backward: micro-batch 3 has no forward in flight; allowed: []",
        "LayerStack.forward: micro-batch 0 already ran forward and awaits its backward",
    ];
    for (got, want) in errs.iter().zip(want) {
        assert!(got.contains(want), "{got:?} lacks {want:?}");
    }
    assert_eq!(errs.len(), 8);
}
