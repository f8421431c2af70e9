//! `kernbench gemm-sweep`: GEMMs over a grid of square and skinny shapes on
//! one SIP, timed against the roofline; results.csv and three figures
//! (latency, achieved vs peak TFLOP/s, simulated / roofline).

use super::{Layout, matmul, roofline};
use crate::sweep::plots::{Series, chart};
use crate::sweep::study::{
    Inputs, PointEnv, PointFile, Record, Study, StudyPoint, csv_rows, rows_that_ran,
};
use kernbench_ccl::CclConfig;
use kernbench_dist::{DistError, init_process_group};
use kernbench_runtime::output::write_file;
use kernbench_spec::spec::{SipTopology, System};
use kernbench_systems::memory::DataMode;
use serde::{Deserialize, Serialize};
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmRow {
    pub family: String,
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
    pub bound_by: String,
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
        kernbench_spec::spec::kinds::keep_sips_below(kinds, 1);
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
        let ran = ctx.wait(&w)?;
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
        family: s.family.into(),
        m: s.m,
        k: s.k,
        n: s.n,
        flops,
        pes: r.pes,
        time_ns,
        roofline_ns: r.bound_ns(),
        bound_by: r.bound_by().into(),
        achieved_tflops: flops as f64 / time_ns / 1e3,
        peak_tflops: r.peak_tflops,
        sim_over_roofline: time_ns / r.bound_ns(),
    })
}

/// A GEMM of the grid as a sweep point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmPoint {
    /// Position in the grid.
    pub index: usize,
    pub shape: Shape,
}

impl StudyPoint for GemmPoint {
    fn index(&self) -> usize {
        self.index
    }
    fn id(&self) -> String {
        let s = self.shape;
        format!("{}-{}x{}x{}", s.family, s.m, s.k, s.n)
    }
    fn label(&self) -> String {
        let s = self.shape;
        format!("{} {}x{}x{}", s.family, s.m, s.k, s.n)
    }
}

/// What a point's file holds: its row, or the error that stopped it.
pub type GemmRecord = Record<GemmRow>;

/// The GEMM grid as a [`Study`]: every shape on one SIP of `system`;
/// results.csv and three figures from the rows.
pub struct GemmStudy<'a> {
    pub system: &'a System,
    pub shapes: Vec<Shape>,
    /// The estimated seconds of each shape, in grid order (the command's
    /// cost, `command_costs::gemm_sweep`).
    pub seconds: Vec<f64>,
}

impl Study for GemmStudy<'_> {
    type Point = GemmPoint;
    type Row = GemmRecord;

    fn points(&self) -> Vec<GemmPoint> {
        let points = self.shapes.iter().enumerate();
        points
            .map(|(index, &shape)| GemmPoint { index, shape })
            .collect()
    }

    fn estimate_seconds(&self, p: &GemmPoint) -> f64 {
        self.seconds.get(p.index).copied().unwrap_or(0.0)
    }

    fn axes(&self, p: &GemmPoint) -> Vec<(String, String)> {
        let s = p.shape;
        [("family", s.family.to_string()), ("m", s.m.to_string())]
            .into_iter()
            .chain([("k", s.k.to_string()), ("n", s.n.to_string())])
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    fn run_point(&self, p: &GemmPoint, _env: &PointEnv) -> GemmRecord {
        let row = run_shape(self.system, p.shape).map_err(|e| e.to_string());
        Record::of(p, row)
    }

    fn failed(&self, p: &GemmPoint, error: String) -> GemmRecord {
        Record::of(p, Err(error))
    }

    fn progress_note(&self, row: &GemmRecord) -> String {
        row.point.clone()
    }

    /// The grid and the system; GEMMs use the embedded ccl config only for
    /// their process group; no input files are saved.
    fn inputs(&self, _ccl_text: &str, _ccl_origin: &str) -> Inputs {
        let grid: Vec<String> = self.points().iter().map(|p| p.label()).collect();
        Inputs::with_embedded_ccl(
            grid.join("\n"),
            "the gemm-sweep grid".into(),
            self.system.to_yaml(),
        )
    }

    fn write_tables(
        &self,
        dir: &Path,
        files: &[PointFile<GemmRecord>],
    ) -> Result<Vec<GemmRecord>, String> {
        // results.csv: one line per GEMM that ran, in grid order.
        write_file(&dir.join(FILES[0]), &csv_rows(&rows_of(files))?)?;
        Ok(files.iter().map(|f| f.row.clone()).collect())
    }

    fn write_figures(
        &self,
        dir: &Path,
        files: &[PointFile<GemmRecord>],
    ) -> Result<Vec<String>, String> {
        write_figures(dir, &rows_of(files))
    }
}

/// The rows of the GEMMs that ran, in grid order.
pub fn rows_of(files: &[PointFile<GemmRecord>]) -> Vec<GemmRow> {
    rows_that_ran(files.iter().map(|f| &f.row))
}

/// The files a gemm-sweep writes into its `--out` besides `points/` and
/// `fingerprint.json`.
pub const FILES: [&str; 4] = [
    "results.csv",
    "gemm_latency.svg",
    "gemm_tflops.svg",
    "gemm_sim_over_roofline.svg",
];

/// Draws the three figures from the rows into `dir`; returns the files.
fn write_figures(dir: &Path, rows: &[GemmRow]) -> Result<Vec<String>, String> {
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
    Ok(FILES[1..].iter().map(|f| f.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point file gives back the row's floats to the bit (as results.csv
    /// wrote them before rows went through point files): serde_json alone
    /// reads 1.5692829457364341 as 1.569282945736434.
    #[test]
    fn a_record_round_trips_its_floats_exactly() {
        let row = GemmRow {
            family: "tall".into(),
            m: 4096,
            k: 4096,
            n: 16,
            flops: 536870912,
            pes: 128,
            time_ns: 12956.0,
            roofline_ns: 8256.0,
            bound_by: "memory".into(),
            achieved_tflops: 41.43801420191417,
            peak_tflops: 262.144,
            sim_over_roofline: 1.5692829457364341,
        };
        let record = GemmRecord {
            index: 10,
            id: "tall-4096x4096x16".into(),
            point: "tall 4096x4096x16".into(),
            row: Some(row),
            error: String::new(),
        };
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains("\"row\":\"tall,4096,4096,16,536870912,128,12956.0,8256.0,memory,41.43801420191417,262.144,1.5692829457364341\""), "{json}");
        let back: GemmRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, record);
        let failed = GemmRecord {
            row: None,
            error: "boom".into(),
            ..record
        };
        let back: GemmRecord =
            serde_json::from_str(&serde_json::to_string(&failed).unwrap()).unwrap();
        assert_eq!(back, failed);
    }
}
