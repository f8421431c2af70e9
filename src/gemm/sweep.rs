//! `kernbench gemm-sweep`: GEMMs over a grid of square and skinny shapes on
//! one SIP, timed against the roofline; results.csv and three figures
//! (latency, achieved vs peak TFLOP/s, simulated / roofline).

use super::{Layout, matmul, roofline};
use crate::ccl::CclConfig;
use crate::dist::{DistError, init_process_group};
use crate::output::write_file;
use crate::spec::{SipTopology, System};
use crate::sweep::plots::{Series, chart};
use kernbench_systems::memory::DataMode;
use rayon::prelude::*;
use serde::Serialize;
use std::path::Path;
use std::sync::Mutex;

/// One GEMM of the grid: its shape family and dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// `square` (m = k = n), `wide` (small m: a few tokens through a big
    /// weight) or `tall` (small n).
    pub family: &'static str,
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

/// The default grid: squares 128…4096, and m or n of 16…1024 against k = 4096 and the other side 4096.
pub fn default_grid() -> Vec<Shape> {
    let sq = [128, 256, 512, 1024, 2048, 4096].map(|d| Shape {
        family: "square",
        m: d,
        k: d,
        n: d,
    });
    let small = [16, 64, 256, 1024];
    let wide = small.map(|m| Shape {
        family: "wide",
        m,
        k: 4096,
        n: 4096,
    });
    let tall = small.map(|n| Shape {
        family: "tall",
        m: 4096,
        k: 4096,
        n,
    });
    sq.into_iter().chain(wide).chain(tall).collect()
}

/// A measured GEMM.
#[derive(Debug, Clone, Serialize)]
pub struct GemmRow {
    pub family: &'static str,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// 2·m·n·k.
    pub flops: u64,
    /// PEs that computed (one per shard of C).
    pub pes: u32,
    /// Simulated time from launch to the last store, ns.
    pub time_ns: f64,
    pub roofline_ns: f64,
    /// `compute` or `memory`: the roofline's larger term.
    pub bound_by: &'static str,
    pub achieved_tflops: f64,
    pub peak_tflops: f64,
    /// time_ns / roofline_ns (≥ 1).
    pub sim_over_roofline: f64,
}

/// The table `kernbench gemm-sweep` prints: one line per GEMM, times in µs.
pub fn table(rows: &[GemmRow]) -> String {
    let mut out = format!(
        "{:>7} {:>6} {:>6} {:>6} {:>12} {:>12} {:>8} {:>9} {:>9} {:>7}\n",
        "family", "m", "k", "n", "time(us)", "bound(us)", "set by", "TFLOP/s", "peak", "sim/rf"
    );
    for r in rows {
        out.push_str(&format!(
            "{:>7} {:>6} {:>6} {:>6} {:>12.3} {:>12.3} {:>8} {:>9.2} {:>9.2} {:>7.3}\n",
            r.family,
            r.m,
            r.k,
            r.n,
            r.time_ns / 1e3,
            r.roofline_ns / 1e3,
            r.bound_by,
            r.achieved_tflops,
            r.peak_tflops,
            r.sim_over_roofline
        ));
    }
    out
}

/// One SIP of `sys` (the GEMM runs inside a device).
pub fn one_sip(sys: &System) -> Result<System, String> {
    let mut spec = sys.spec.clone();
    spec.system.sips.count = 1;
    // SIP 0 keeps its kind: the GEMM runs on it.
    if let Some(kinds) = &mut spec.system.sips.kinds {
        crate::spec::kinds::keep_sips_below(kinds, 1);
    }
    spec.system.sips.topology = SipTopology::Ring1d;
    (spec.system.sips.w, spec.system.sips.h) = (None, None);
    System::from_spec(spec, "one SIP of the gemm-sweep system").map_err(|e| e.to_string())
}

/// Runs one GEMM, timing only, with `Layout::spread` and IPCQ slots out of TCM.
pub fn run_shape(sys: &System, s: Shape) -> Result<GemmRow, DistError> {
    let sys = one_sip(sys).map_err(DistError::Config)?;
    let ccl = CclConfig::embedded_default();
    let mut pg = init_process_group(&sys, &ccl, "pairwise", DataMode::TimingOnly)?;
    // The roofline of the PEs and memories the GEMM runs on: SIP 0's kind.
    let mut spec = sys.spec.clone();
    let kind = sys.kinds.of(0);
    (spec.pe, spec.memory) = (kind.pe, kind.memory.clone());
    let out = Mutex::new(None);
    pg.spawn(1, |ctx| {
        let l = Layout::spread(s.m, s.n, sys.cubes_per_sip(), sys.pes_per_cube());
        let a = ctx.empty((s.m, s.k), l.a)?;
        let b = ctx.empty((s.k, s.n), l.b)?;
        let c = ctx.empty((s.m, s.n), l.c)?;
        let r = roofline(&spec, &a, &b, &c);
        let w = matmul(ctx, &a, &b, &c)?;
        let ran = ctx.wait(w)?;
        *out.lock().expect("one worker") = Some((r, ran.ticks()));
        Ok(())
    })?;
    let (r, ticks) = out
        .into_inner()
        .expect("one worker")
        .expect("the worker ran");
    let time_ns = ticks as f64 * sys.spec.system.tick_ns;
    let flops = 2 * r.macs;
    Ok(GemmRow {
        family: s.family,
        m: s.m,
        k: s.k,
        n: s.n,
        flops,
        pes: r.pes,
        time_ns,
        roofline_ns: r.bound_ns(),
        bound_by: r.bound_by(),
        achieved_tflops: flops as f64 / time_ns / 1e3,
        peak_tflops: r.peak_tflops,
        sim_over_roofline: time_ns / r.bound_ns(),
    })
}

/// Runs every shape on rayon's pool, in grid order.
pub fn run_grid(sys: &System, shapes: &[Shape]) -> Result<Vec<GemmRow>, DistError> {
    run_grid_with(sys, shapes, &|_| {})
}

/// [`run_grid`], calling `done(i)` as shape `i` finishes (in any order).
pub fn run_grid_with(
    sys: &System,
    shapes: &[Shape],
    done: &(dyn Fn(usize) + Sync),
) -> Result<Vec<GemmRow>, DistError> {
    shapes
        .par_iter()
        .enumerate()
        .map(|(i, &s)| {
            let row = run_shape(sys, s);
            done(i);
            row
        })
        .collect()
}

/// The files [`write`] puts in its directory.
pub const FILES: [&str; 4] = [
    "results.csv",
    "gemm_latency.svg",
    "gemm_tflops.svg",
    "gemm_sim_over_roofline.svg",
];

/// Writes results.csv and the three figures into `dir`; returns the files.
pub fn write(dir: &Path, rows: &[GemmRow]) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| e.to_string())?;
    }
    let bytes = w.into_inner().map_err(|e| e.to_string())?;
    write_file(&dir.join(FILES[0]), &bytes)?;
    let by_family = |y: &dyn Fn(&GemmRow) -> f64| -> Series {
        ["square", "wide", "tall"]
            .iter()
            .map(|f| {
                let pts = rows
                    .iter()
                    .filter(|r| r.family == *f)
                    .map(|r| (r.flops as f64, y(r)))
                    .collect();
                (f.to_string(), pts)
            })
            .filter(|s: &(String, Vec<(f64, f64)>)| !s.1.is_empty())
            .collect()
    };
    let mut files = vec![FILES[0].to_string()];
    let x = "GEMM size, FLOPs (2·m·n·k)";
    chart(
        &dir.join(FILES[1]),
        "GEMM latency vs size (one SIP)",
        x,
        "time, us (log)",
        true,
        &by_family(&|r| r.time_ns / 1e3),
    )?;
    let mut tflops = by_family(&|r| r.achieved_tflops);
    if let Some(top) = rows
        .iter()
        .max_by(|a, b| a.peak_tflops.total_cmp(&b.peak_tflops))
    {
        let xs = rows.iter().map(|r| r.flops as f64);
        let (lo, hi) = xs.fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
        let peak = top.peak_tflops;
        tflops.push((
            format!("peak, {} PEs", top.pes),
            vec![(lo, peak), (hi, peak)],
        ));
    }
    chart(
        &dir.join(FILES[2]),
        "GEMM achieved vs peak TFLOP/s (f16)",
        x,
        "TFLOP/s (log)",
        true,
        &tflops,
    )?;
    chart(
        &dir.join(FILES[3]),
        "Simulated time / roofline bound (1 = at the bound)",
        x,
        "simulated / roofline",
        false,
        &by_family(&|r| r.sim_over_roofline),
    )?;
    files.extend(FILES[1..].iter().map(|f| f.to_string()));
    Ok(files)
}
