//! `kernbench sweep --plan tp`: the TP scaling study, a sweep [`Study`]. A
//! TP plan (`workload: tp_block`, configs/sweeps/tp.yaml) runs [`run_block`]
//! for every topology × hidden × TP of its grid, on a system of TP SIPs, and
//! writes results.csv and three figures: time per block, the communication
//! share of it, and the scaling efficiency (speedup over TP = 1 / TP).

use super::block::{BlockShape, run_block};
use crate::sweep::fingerprint;
use crate::sweep::plan::{TP_PLAN, with_base};
use crate::sweep::plots::{Series, chart};
use crate::sweep::study::{
    Inputs, PointEnv, PointFile, Record, Study, StudyPoint, csv_rows, rows_that_ran,
};
use kernbench_ccl::CclConfig;
use kernbench_runtime::output::write_file;
use kernbench_spec::spec::{SipTopology, SpecError, System, parse_yaml};
use serde::{Deserialize, Serialize};
use serde_yaml::Mapping;
use std::path::Path;

/// What a TP plan may vary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpGrid {
    pub topology: Vec<SipTopology>,
    pub hidden: Vec<usize>,
    pub tp: Vec<u32>,
}

/// A TP scaling plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpPlan {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Must be `tp_block`.
    pub workload: String,
    /// Spec fields set on every point (dotted paths), as in sweep plans.
    #[serde(default)]
    pub base: Mapping,
    /// The ccl.yaml entry of the all-reduces; omitted: `auto`, each
    /// all-reduce the autotuner's pick for its size and TP group.
    #[serde(default = "auto_entry")]
    pub algorithm: String,
    pub tokens: usize,
    pub grid: TpGrid,
}

/// A TP plan's default `algorithm`.
fn auto_entry() -> String {
    kernbench_ccl::AUTO.into()
}

/// One point's result; times in µs, of rank 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TpRow {
    pub topology: String,
    /// Also the SIP count: the world is one TP group.
    pub tp: u32,
    pub hidden: usize,
    pub tokens: usize,
    /// The ccl.yaml entry the plan names (`auto` by default).
    pub algorithm: String,
    /// The configuration each all-reduce ran, in order, `+`-joined (under
    /// `auto`, the tuner's picks; at TP = 1 the all-reduces are over the
    /// cubes of one SIP).
    pub all_reduces: String,
    pub time_us: f64,
    pub compute_us: f64,
    pub comm_us: f64,
    pub hidden_comm_us: f64,
    pub exposed_comm_us: f64,
    pub launch_wait_us: f64,
    /// time at TP = 1 (same topology and hidden) / time; empty without a TP = 1 point.
    pub speedup: Option<f64>,
    /// speedup / TP.
    pub efficiency: Option<f64>,
}

impl TpPlan {
    /// The plan `name_or_path` if it is a TP plan: the built-in `tp`, or a
    /// YAML file whose `workload:` is `tp_block`. None for other plans.
    pub fn find(name_or_path: &str) -> Result<Option<TpPlan>, SpecError> {
        let (text, origin) = if name_or_path == TP_PLAN.0 {
            (TP_PLAN.1.to_string(), "configs/sweeps/tp.yaml".to_string())
        } else {
            let path = Path::new(name_or_path);
            // A file that cannot be read or prepared is no TP plan; the
            // sweep plan reader reports why.
            let Ok(text) = kernbench_spec::spec::input::read_config(path, "sweep plan") else {
                return Ok(None);
            };
            let Ok(ready) = kernbench_spec::spec::input::prepare_yaml(&text, name_or_path) else {
                return Ok(None);
            };
            let head: serde_yaml::Value = serde_yaml::from_str(&ready).unwrap_or_default();
            if head.get("workload").and_then(|w| w.as_str()) != Some("tp_block") {
                return Ok(None);
            }
            (text, name_or_path.to_string())
        };
        let plan: TpPlan = parse_yaml(&text, &origin)?;
        crate::sweep::plan::check_name(&origin, &plan.name)?;
        let err = |path: &str, problem: String, allowed: &str| SpecError {
            file: origin.clone(),
            path: path.into(),
            line: None,
            problem,
            allowed: allowed.into(),
        };
        if plan.workload != "tp_block" {
            return Err(err(
                "workload",
                format!("unknown workload '{}'", plan.workload),
                "tp_block",
            ));
        }
        if plan.grid.topology.is_empty() || plan.grid.hidden.is_empty() || plan.grid.tp.is_empty() {
            return Err(err(
                "grid",
                "an empty axis".into(),
                "at least one value on topology, hidden and tp",
            ));
        }
        if let Some(&t) = plan.grid.tp.iter().find(|&&t| t == 0) {
            return Err(err("grid.tp", format!("tp {t}"), "TP sizes of at least 1"));
        }
        if plan.tokens == 0 {
            return Err(err("tokens", "0 tokens".into(), "at least 1"));
        }
        CclConfig::embedded_default()
            .entry(&plan.algorithm)
            .map_err(|(p, a)| err("algorithm", p, &a))?;
        Ok(Some(plan))
    }

    /// `base` with the plan's `base:` fields set.
    pub fn base_system(&self, base: &System) -> Result<System, String> {
        with_base(base, &self.base, &self.name).map_err(|e| e.to_string())
    }

    /// Points in order: topology, then hidden, then TP.
    pub fn points(&self) -> Vec<(SipTopology, usize, u32)> {
        let g = &self.grid;
        g.topology
            .iter()
            .flat_map(|&t| {
                g.hidden
                    .iter()
                    .flat_map(move |&h| g.tp.iter().map(move |&p| (t, h, p)))
            })
            .collect()
    }
}

/// A point of a TP plan: one topology, hidden size and TP size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TpPoint {
    /// Position in [`TpPlan::points`]' order.
    pub index: usize,
    pub topology: SipTopology,
    pub hidden: usize,
    pub tp: u32,
}

impl StudyPoint for TpPoint {
    fn index(&self) -> usize {
        self.index
    }
    fn id(&self) -> String {
        format!("{}-h{}-tp{}", self.topology.name(), self.hidden, self.tp)
    }
    fn label(&self) -> String {
        format!(
            "{} x{}, hidden {}",
            self.topology.name(),
            self.tp,
            self.hidden
        )
    }
}

/// What a point's file holds: its row, or the error that stopped it.
pub type TpRecord = Record<TpRow>;

/// A TP plan as a [`Study`]: every point a transformer block on a system
/// of TP SIPs; results.csv and three figures from the rows.
pub struct TpStudy<'a> {
    pub plan: &'a TpPlan,
    /// The base system with the plan's `base:` fields set.
    pub base: System,
    ccl: CclConfig,
    /// The estimated seconds of each point, in plan order.
    seconds: Vec<f64>,
}

impl<'a> TpStudy<'a> {
    /// The study of `plan` on `base`; `seconds` are the points' estimates in
    /// plan order (the command's cost, `command_costs::tp_study`).
    pub fn new(plan: &'a TpPlan, base: &System, seconds: Vec<f64>) -> Result<Self, String> {
        Ok(TpStudy {
            plan,
            base: plan.base_system(base)?,
            ccl: CclConfig::embedded_default(),
            seconds,
        })
    }

    /// A point's row: the block on a system of TP SIPs of its topology.
    fn block_row(&self, p: &TpPoint, autotune_cache: Option<&Path>) -> Result<TpRow, String> {
        let (topology, hidden, tp) = (p.topology, p.hidden, p.tp);
        let mut spec = self.base.spec.clone();
        spec.system.sips.topology = topology;
        let sys = System::from_spec(spec, &self.base.origin)
            .and_then(|s| s.with_sips(tp))
            .map_err(|e| format!("{} x{tp}: {e}", topology.name()))?;
        let shape = BlockShape {
            tokens: self.plan.tokens,
            hidden,
        };
        let r = run_block(
            &sys,
            &self.ccl,
            &self.plan.algorithm,
            tp,
            shape,
            autotune_cache,
        )
        .map_err(|e| format!("{} x{tp}, hidden {hidden}: {e}", topology.name()))?;
        let b = r.breakdown;
        let tick_us = self.base.spec.system.tick_ns / 1e3;
        let us = |t: u64| t as f64 * tick_us;
        Ok(TpRow {
            topology: topology.name().into(),
            tp,
            hidden,
            tokens: self.plan.tokens,
            algorithm: self.plan.algorithm.clone(),
            all_reduces: r.allreduce_configs.join("+"),
            time_us: us(b.total),
            compute_us: us(b.compute),
            comm_us: us(b.communication),
            hidden_comm_us: us(b.hidden),
            exposed_comm_us: us(b.communication - b.hidden),
            launch_wait_us: us(b.launch),
            speedup: None,
            efficiency: None,
        })
    }
}

impl Study for TpStudy<'_> {
    type Point = TpPoint;
    type Row = TpRecord;

    fn points(&self) -> Vec<TpPoint> {
        self.plan
            .points()
            .into_iter()
            .enumerate()
            .map(|(index, (topology, hidden, tp))| TpPoint {
                index,
                topology,
                hidden,
                tp,
            })
            .collect()
    }

    fn estimate_seconds(&self, p: &TpPoint) -> f64 {
        self.seconds.get(p.index).copied().unwrap_or(0.0)
    }

    fn axes(&self, p: &TpPoint) -> Vec<(String, String)> {
        vec![
            ("topology".into(), p.topology.name().into()),
            ("hidden".into(), p.hidden.to_string()),
            ("tp".into(), p.tp.to_string()),
        ]
    }

    fn run_point(&self, p: &TpPoint, env: &PointEnv) -> TpRecord {
        Record::of(p, self.block_row(p, env.autotune_cache))
    }

    fn failed(&self, p: &TpPoint, error: String) -> TpRecord {
        Record::of(p, Err(error))
    }

    fn progress_note(&self, row: &TpRecord) -> String {
        row.point.clone()
    }

    /// The plan as parsed, the base system and the embedded ccl config
    /// (TP plans take no --ccl); no input files are saved.
    fn inputs(&self, _ccl_text: &str, _ccl_origin: &str) -> Inputs {
        Inputs::with_embedded_ccl(
            serde_yaml::to_string(self.plan).expect("TP plans serialize"),
            self.plan.name.clone(),
            self.base.to_yaml(),
        )
    }

    fn write_tables(
        &self,
        dir: &Path,
        files: &[PointFile<TpRecord>],
    ) -> Result<Vec<TpRecord>, String> {
        let records = with_speedups(files);
        let rows: Vec<TpRow> = rows_that_ran(&records);
        // results.csv: one line per point that ran, in plan order.
        write_file(&dir.join(FILES[1]), &csv_rows(&rows)?)?;
        Ok(records)
    }

    fn write_figures(
        &self,
        dir: &Path,
        files: &[PointFile<TpRecord>],
    ) -> Result<Vec<String>, String> {
        let rows: Vec<TpRow> = with_speedups(files)
            .into_iter()
            .filter_map(|r| r.row)
            .collect();
        write_figures(dir, &rows, &label(self.plan, &self.base))
    }
}

/// The finished points' records with speedup and efficiency set: over the
/// TP = 1 point of the same topology and hidden size, if it ran.
pub fn with_speedups(files: &[PointFile<TpRecord>]) -> Vec<TpRecord> {
    let mut records: Vec<TpRecord> = files.iter().map(|f| f.row.clone()).collect();
    let one: Vec<(String, usize, f64)> = records
        .iter()
        .filter_map(|r| r.row.as_ref())
        .filter(|r| r.tp == 1)
        .map(|r| (r.topology.clone(), r.hidden, r.time_us))
        .collect();
    for r in records.iter_mut().filter_map(|r| r.row.as_mut()) {
        if let Some(t1) = one.iter().find(|o| o.0 == r.topology && o.1 == r.hidden) {
            r.speedup = Some(t1.2 / r.time_us);
            r.efficiency = Some(t1.2 / r.time_us / f64::from(r.tp));
        }
    }
    records
}

/// The table a TP sweep prints: one line per point, times in µs.
pub fn table(rows: &[TpRow]) -> String {
    let mut out = format!(
        "{:>16} {:>6} {:>3} {:>12} {:>12} {:>12} {:>12} {:>8} {:>6}  {}\n",
        "topology",
        "hidden",
        "tp",
        "time(us)",
        "compute",
        "comm",
        "launch+wait",
        "speedup",
        "eff",
        "all-reduces"
    );
    for r in rows {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        out.push_str(&format!(
            "{:>16} {:>6} {:>3} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>8} {:>6}  {}\n",
            r.topology,
            r.hidden,
            r.tp,
            r.time_us,
            r.compute_us,
            r.comm_us,
            r.launch_wait_us,
            opt(r.speedup),
            opt(r.efficiency),
            if r.all_reduces.is_empty() {
                "-"
            } else {
                &r.all_reduces
            }
        ));
    }
    out
}

/// What the figures' titles say of the system: its SIP and the tokens.
pub fn label(plan: &TpPlan, base: &System) -> String {
    format!(
        "{} cubes x {} PEs per SIP, {} tokens",
        base.cubes_per_sip(),
        base.pes_per_cube(),
        plan.tokens
    )
}

/// One series per (topology, hidden) over TP.
fn by_slice(rows: &[TpRow], y: &dyn Fn(&TpRow) -> Option<f64>) -> Series {
    let mut out: Series = Vec::new();
    for r in rows {
        let Some(v) = y(r) else { continue };
        let name = format!("{} h={}", r.topology, r.hidden);
        match out.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((f64::from(r.tp), v)),
            None => out.push((name, vec![(f64::from(r.tp), v)])),
        }
    }
    out
}

/// The files a TP sweep writes into its `--out` besides `points/`: no
/// input may be one of them.
pub const FILES: [&str; 5] = [
    fingerprint::FILE,
    "results.csv",
    "tp_block_time.svg",
    "tp_comm_share.svg",
    "tp_efficiency.svg",
];

/// Draws the three figures from the rows into `dir`; returns the files.
fn write_figures(dir: &Path, rows: &[TpRow], system: &str) -> Result<Vec<String>, String> {
    let x = "TP size (SIPs)";
    let figures = [
        (
            FILES[2],
            "time per block, us (log)",
            true,
            by_slice(rows, &|r| Some(r.time_us)),
        ),
        (
            FILES[3],
            "communication / time per block",
            false,
            by_slice(rows, &|r| Some(r.comm_us / r.time_us)),
        ),
        (
            FILES[4],
            "speedup / TP",
            false,
            by_slice(rows, &|r| r.efficiency),
        ),
    ];
    let mut files = Vec::new();
    for (file, y, log, series) in figures {
        let title = format!("Transformer block, TP scaling ({system})");
        chart(&dir.join(file), &title, x, y, log, &series)?;
        files.push(file.into());
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tp: u32, time_us: f64, speedup: Option<f64>) -> TpRow {
        TpRow {
            topology: "ring_1d".into(),
            tp,
            hidden: 1024,
            tokens: 64,
            algorithm: "auto".into(),
            all_reduces: if tp > 1 {
                "dims+dims".into()
            } else {
                String::new()
            },
            time_us,
            compute_us: 20.238,
            comm_us: 26.356,
            hidden_comm_us: 0.0,
            exposed_comm_us: 26.356,
            launch_wait_us: 6.195,
            speedup,
            efficiency: speedup.map(|s| s / f64::from(tp)),
        }
    }

    /// The lines `sweep --plan tests/data/doc/tiny_tp.yaml` prints, a point
    /// without a TP = 1 run showing `-` for speedup and efficiency.
    #[test]
    fn table_is_the_sweeps_table_to_the_byte() {
        let rows = [row(2, 52.789, Some(0.7963780333023925)), row(4, 40.0, None)];
        assert_eq!(
            table(&rows),
            "        topology hidden  tp     time(us)      compute         comm  launch+wait  speedup    eff  all-reduces\n\
             \x20        ring_1d   1024   2         52.8         20.2         26.4          6.2     0.80   0.40  dims+dims\n\
             \x20        ring_1d   1024   4         40.0         20.2         26.4          6.2        -      -  dims+dims\n"
        );
    }
}
