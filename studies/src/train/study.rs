//! `kernbench sweep --plan train`: training steps over a grid, a sweep
//! [`Study`]. A train plan (`workload: train_step`, configs/sweeps/train.yaml)
//! runs [`train_step`] for every topology × model size × layers per stage
//! × sequence × micro-batches × DP×TP×PP × layout × algorithm of its grid,
//! on its `sips` SIPs, and writes results.csv (with each row's network
//! model) and three figures: step time by component per configuration,
//! MFU against TP × PP, and the exposed communication share.

use super::{
    AXIS_ORDERS, AxisOrder, DP_REDUCES, DpReduce, MODELS, Model, ModelShape, Parallel, SCHEDULES,
    Schedule, TrainStep, train_step,
};
use crate::gemm::Placement;
use crate::sweep::fingerprint;
use crate::sweep::plan::{TRAIN_PLAN, check_name, with_base};
use crate::sweep::plots::{Series, chart};
use crate::sweep::study::{
    Inputs, PointEnv, PointFile, Record, Study, StudyPoint, csv_rows, rows_that_ran,
};
use crate::transformer::TpOptions;
use kernbench_ccl::CclConfig;
use kernbench_runtime::output::write_file;
use kernbench_spec::spec::{ComputeModel, SipTopology, SpecError, System, parse_yaml};
use kernbench_systems::memory::DataMode;
use serde::{Deserialize, Serialize};
use serde_yaml::Mapping;
use std::path::Path;

/// What a train plan may vary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainGrid {
    pub topology: Vec<SipTopology>,
    pub hidden: Vec<usize>,
    pub layers_per_stage: Vec<usize>,
    pub seq: Vec<usize>,
    pub micro_batches: Vec<usize>,
    /// `DPxTPxPP`, e.g. `2x4x2`.
    pub parallel: Vec<String>,
    /// Axis orders, innermost first (`tp-dp-pp`, …).
    pub layout: Vec<String>,
    /// ccl.yaml entries of the DP collectives (`auto`: the autotuner's pick).
    pub algorithm: Vec<String>,
}

/// A training-step plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainPlan {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Must be `train_step`.
    pub workload: String,
    /// Spec fields set on every point (dotted paths), as in sweep plans;
    /// `network.model: flow` runs every point on the flow-level network.
    #[serde(default)]
    pub base: Mapping,
    /// SIPs of every point's system.
    pub sips: u32,
    pub model: String,
    /// The transformer model's head width: heads = hidden / head_dim
    /// (Megatron's --kv-channels); its MLP is 4 × hidden wide.
    #[serde(default = "default_head_dim")]
    pub head_dim: usize,
    /// Transformer model: Megatron's --sequence-parallel.
    #[serde(default)]
    pub sequence_parallel: bool,
    /// Transformer model: Megatron's --recompute-activations (whole layers).
    #[serde(default)]
    pub recompute: bool,
    pub schedule: String,
    pub dp_reduce: String,
    pub bucket_bytes: u64,
    pub micro_batch: usize,
    pub grid: TrainGrid,
}

fn default_head_dim() -> usize {
    128
}

/// One point: the grid's values at it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainPoint {
    pub index: usize,
    pub topology: SipTopology,
    pub hidden: usize,
    pub layers_per_stage: usize,
    pub seq: usize,
    pub micro_batches: usize,
    pub parallel: Parallel,
    pub algorithm: String,
}

impl StudyPoint for TrainPoint {
    fn index(&self) -> usize {
        self.index
    }
    fn id(&self) -> String {
        let p = &self.parallel;
        format!(
            "{}-h{}-l{}-s{}-m{}-{}x{}x{}-{}-{}",
            self.topology.name(),
            self.hidden,
            self.layers_per_stage,
            self.seq,
            self.micro_batches,
            p.dp,
            p.tp,
            p.pp,
            p.order.name(),
            self.algorithm
        )
    }
    fn label(&self) -> String {
        self.id()
    }
}

/// One point's result; times in µs, means over ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainRow {
    pub topology: String,
    pub sips: u32,
    pub dp: u32,
    pub tp: u32,
    pub pp: u32,
    pub layout: String,
    pub hidden: usize,
    pub layers_per_stage: usize,
    pub seq: usize,
    pub micro_batches: usize,
    pub schedule: String,
    pub algorithm: String,
    /// The network model the point ran on (`packet` or `flow`).
    pub network_model: String,
    /// How its compute kernels were timed (`tiled` or `measured`).
    pub compute_model: String,
    pub step_us: f64,
    pub compute_us: f64,
    pub exposed_comm_us: f64,
    pub hidden_comm_us: f64,
    pub bubble_us: f64,
    /// Other idle time: launch overhead between kernels, host waits.
    pub gaps_us: f64,
    /// Messages between stages (`send` + `recv` of a rank, covered).
    pub p2p_us: f64,
    /// DP collectives (all-reduce, reduce-scatter, all-gather).
    pub dp_comm_us: f64,
    pub mfu: f64,
    /// exposed communication / step.
    pub exposed_share: f64,
}

pub type TrainRecord = Record<TrainRow>;

fn plan_error(origin: &str, path: &str, problem: String, allowed: &str) -> SpecError {
    SpecError {
        file: origin.into(),
        path: path.into(),
        line: None,
        problem,
        allowed: allowed.into(),
    }
}

/// Parses `DPxTPxPP`.
fn parse_parallel(s: &str, order: AxisOrder) -> Option<Parallel> {
    let v: Vec<u32> = s
        .split('x')
        .map(|n| n.trim().parse().ok())
        .collect::<Option<_>>()?;
    match v.as_slice() {
        &[dp, tp, pp] => Some(Parallel { dp, tp, pp, order }),
        _ => None,
    }
}

impl TrainPlan {
    /// The plan `name_or_path` if it is a train plan: the built-in
    /// `train`, or a YAML file whose `workload:` is `train_step`.
    pub fn find(name_or_path: &str) -> Result<Option<TrainPlan>, SpecError> {
        let (text, origin) = if name_or_path == TRAIN_PLAN.0 {
            (
                TRAIN_PLAN.1.to_string(),
                "configs/sweeps/train.yaml".to_string(),
            )
        } else {
            let path = Path::new(name_or_path);
            let Ok(text) = kernbench_spec::spec::input::read_config(path, "sweep plan") else {
                return Ok(None);
            };
            let Ok(ready) = kernbench_spec::spec::input::prepare_yaml(&text, name_or_path) else {
                return Ok(None);
            };
            let head: serde_yaml::Value = serde_yaml::from_str(&ready).unwrap_or_default();
            if head.get("workload").and_then(|w| w.as_str()) != Some("train_step") {
                return Ok(None);
            }
            (text, name_or_path.to_string())
        };
        let plan: TrainPlan = parse_yaml(&text, &origin)?;
        check_name(&origin, &plan.name)?;
        plan.check(&origin)?;
        Ok(Some(plan))
    }

    /// Checks every name and axis, naming the field.
    fn check(&self, origin: &str) -> Result<(), SpecError> {
        let err = |path: &str, p: String, a: &str| plan_error(origin, path, p, a);
        let names = |path: &str, v: &str, ok: bool, allowed: &[&str]| {
            if ok {
                return Ok(());
            }
            Err(err(
                path,
                format!("unknown {path} '{v}'"),
                &allowed.join(", "),
            ))
        };
        names(
            "model",
            &self.model,
            Model::parse("", &self.model).is_ok(),
            &MODELS,
        )?;
        let schedule_ok = Schedule::parse("", &self.schedule).is_ok();
        names("schedule", &self.schedule, schedule_ok, &SCHEDULES)?;
        let reduce_ok = DpReduce::parse("", &self.dp_reduce).is_ok();
        names("dp_reduce", &self.dp_reduce, reduce_ok, &DP_REDUCES)?;
        let transformer = Model::parse("", &self.model) == Ok(Model::Transformer);
        let splits = |h: &&usize| self.head_dim > 0 && h.is_multiple_of(self.head_dim);
        if let Some(h) = self.grid.hidden.iter().find(|h| transformer && !splits(h)) {
            return Err(err(
                "head_dim",
                format!("head_dim {} does not divide hidden {h}", self.head_dim),
                "a head width dividing every hidden size of the grid (128 by default)",
            ));
        }
        let g = &self.grid;
        let lens = [
            g.topology.len(),
            g.hidden.len(),
            g.layers_per_stage.len(),
            g.seq.len(),
            g.micro_batches.len(),
            g.parallel.len(),
            g.layout.len(),
            g.algorithm.len(),
        ];
        if lens.contains(&0) {
            return Err(err(
                "grid",
                "an empty axis".into(),
                "at least one value on every axis",
            ));
        }
        for l in &g.layout {
            let ok = AxisOrder::parse("", l).is_ok();
            names("grid.layout", l, ok, &AXIS_ORDERS)?;
        }
        for p in &g.parallel {
            if parse_parallel(p, AxisOrder::default()).is_none() {
                return Err(err(
                    "grid.parallel",
                    format!("'{p}' is not DPxTPxPP"),
                    "three whole numbers joined by x, e.g. 2x4x2",
                ));
            }
        }
        let ccl = CclConfig::embedded_default();
        for a in &g.algorithm {
            ccl.entry(a)
                .map_err(|(p, al)| err("grid.algorithm", p, &al))?;
        }
        Ok(())
    }

    /// `base` with the plan's `base:` fields set; compute is measured
    /// unless one of the two names a model.
    pub fn base_system(&self, base: &System) -> Result<System, String> {
        let mut sys = with_base(base, &self.base, &self.name).map_err(|e| e.to_string())?;
        let compute = &mut sys.spec.simulation.compute;
        compute.get_or_insert(ComputeModel::Measured);
        Ok(sys)
    }

    /// Every point, in order: topology, hidden, layers, seq, micro-batches,
    /// parallel, layout, algorithm (the last varies fastest).
    pub fn points(&self) -> Vec<TrainPoint> {
        let g = &self.grid;
        let mut out = Vec::new();
        for &topology in &g.topology {
            for &hidden in &g.hidden {
                for &layers_per_stage in &g.layers_per_stage {
                    for &seq in &g.seq {
                        for &micro_batches in &g.micro_batches {
                            for p in &g.parallel {
                                for l in &g.layout {
                                    let order = AxisOrder::parse("layout", l).unwrap_or_default();
                                    let Some(parallel) = parse_parallel(p, order) else {
                                        continue;
                                    };
                                    for algorithm in &g.algorithm {
                                        out.push(TrainPoint {
                                            index: out.len(),
                                            topology,
                                            hidden,
                                            layers_per_stage,
                                            seq,
                                            micro_batches,
                                            parallel,
                                            algorithm: algorithm.clone(),
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// The point's step configuration.
    pub fn step(&self, p: &TrainPoint, pes_per_cube: u32) -> Result<TrainStep, String> {
        Ok(TrainStep {
            model: Model::parse("model", &self.model)?,
            shape: ModelShape {
                hidden: p.hidden,
                heads: p.hidden / self.head_dim.max(1),
                ffn_hidden: 4 * p.hidden,
                seq: p.seq,
                micro_batch: self.micro_batch,
                layers_per_stage: p.layers_per_stage,
            },
            tp_options: TpOptions {
                sequence_parallel: self.sequence_parallel,
                recompute: self.recompute,
            },
            parallel: p.parallel,
            schedule: Schedule::parse("schedule", &self.schedule)?,
            micro_batches: p.micro_batches,
            dp_reduce: DpReduce::parse("dp_reduce", &self.dp_reduce)?,
            bucket_bytes: self.bucket_bytes,
            placement: Placement::off_leader(pes_per_cube),
            seed: 1,
        })
    }

    /// The point's system: the base on `sips` SIPs of its topology.
    pub fn system(&self, base: &System, p: &TrainPoint) -> Result<System, String> {
        let mut spec = base.spec.clone();
        spec.system.sips.topology = p.topology;
        spec.system.sips.w = None;
        spec.system.sips.h = None;
        System::from_spec(spec, &base.origin)
            .and_then(|s| s.with_sips(self.sips))
            .map_err(|e| format!("{} x{}: {e}", p.topology.name(), self.sips))
    }
}

/// A train plan as a [`Study`].
pub struct TrainStudy<'a> {
    pub plan: &'a TrainPlan,
    pub base: System,
    seconds: Vec<f64>,
}

impl<'a> TrainStudy<'a> {
    pub fn new(plan: &'a TrainPlan, base: &System, seconds: Vec<f64>) -> Result<Self, String> {
        Ok(TrainStudy {
            plan,
            base: plan.base_system(base)?,
            seconds,
        })
    }

    fn row(&self, p: &TrainPoint, cache: Option<&Path>) -> Result<TrainRow, String> {
        let sys = self.plan.system(&self.base, p)?;
        let step = self.plan.step(p, sys.pes_per_cube())?;
        let ccl = CclConfig::embedded_default();
        let mode = DataMode::TimingOnly;
        let mut pg =
            crate::autotune::init_process_group_cached(&sys, &ccl, &p.algorithm, mode, cache)
                .map_err(|e| e.to_string())?;
        let r = train_step(&mut pg, &step, mode).map_err(|e| e.to_string())?;
        let sum = r.summary();
        let kinds = |names: &[&str]| -> f64 {
            sum.by_kind
                .iter()
                .filter(|k| names.contains(&k.0))
                .map(|k| k.1)
                .sum()
        };
        Ok(TrainRow {
            topology: p.topology.name().into(),
            sips: self.plan.sips,
            dp: p.parallel.dp,
            tp: p.parallel.tp,
            pp: p.parallel.pp,
            layout: p.parallel.order.name(),
            hidden: p.hidden,
            layers_per_stage: p.layers_per_stage,
            seq: p.seq,
            micro_batches: p.micro_batches,
            schedule: self.plan.schedule.clone(),
            algorithm: p.algorithm.clone(),
            network_model: sys.spec.network.model.name().into(),
            compute_model: sys.spec.simulation.compute_model().name().into(),
            step_us: sum.step_us,
            compute_us: sum.compute_us,
            exposed_comm_us: sum.exposed_us,
            hidden_comm_us: sum.hidden_us,
            bubble_us: sum.bubble_us,
            gaps_us: sum.gaps_us,
            p2p_us: kinds(&["send", "recv"]),
            dp_comm_us: kinds(&["all_reduce", "reduce_scatter", "all_gather"]),
            mfu: r.mfu,
            exposed_share: if sum.step_us > 0.0 {
                sum.exposed_us / sum.step_us
            } else {
                0.0
            },
        })
    }
}

/// The files a train sweep writes besides `points/`.
pub const FILES: [&str; 5] = [
    fingerprint::FILE,
    "results.csv",
    "train_step_components.svg",
    "train_mfu.svg",
    "train_exposed_share.svg",
];

impl Study for TrainStudy<'_> {
    type Point = TrainPoint;
    type Row = TrainRecord;

    fn points(&self) -> Vec<TrainPoint> {
        self.plan.points()
    }

    fn estimate_seconds(&self, p: &TrainPoint) -> f64 {
        self.seconds.get(p.index).copied().unwrap_or(0.0)
    }

    fn axes(&self, p: &TrainPoint) -> Vec<(String, String)> {
        let par = &p.parallel;
        vec![
            ("topology".into(), p.topology.name().into()),
            ("hidden".into(), p.hidden.to_string()),
            ("layers_per_stage".into(), p.layers_per_stage.to_string()),
            ("seq".into(), p.seq.to_string()),
            ("micro_batches".into(), p.micro_batches.to_string()),
            (
                "parallel".into(),
                format!("{}x{}x{}", par.dp, par.tp, par.pp),
            ),
            ("layout".into(), par.order.name()),
            ("algorithm".into(), p.algorithm.clone()),
        ]
    }

    fn run_point(&self, p: &TrainPoint, env: &PointEnv) -> TrainRecord {
        Record::of(p, self.row(p, env.autotune_cache))
    }

    fn failed(&self, p: &TrainPoint, error: String) -> TrainRecord {
        Record::of(p, Err(error))
    }

    fn progress_note(&self, row: &TrainRecord) -> String {
        row.point.clone()
    }

    fn inputs(&self, _ccl_text: &str, _ccl_origin: &str) -> Inputs {
        Inputs::with_embedded_ccl(
            serde_yaml::to_string(self.plan).unwrap_or_default(),
            self.plan.name.clone(),
            self.base.to_yaml(),
        )
    }

    fn write_tables(
        &self,
        dir: &Path,
        files: &[PointFile<TrainRecord>],
    ) -> Result<Vec<TrainRecord>, String> {
        let records: Vec<TrainRecord> = files.iter().map(|f| f.row.clone()).collect();
        let rows: Vec<TrainRow> = rows_that_ran(&records);
        write_file(&dir.join(FILES[1]), &csv_rows(&rows)?)?;
        Ok(records)
    }

    fn write_figures(
        &self,
        dir: &Path,
        files: &[PointFile<TrainRecord>],
    ) -> Result<Vec<String>, String> {
        let rows: Vec<TrainRow> = files.iter().filter_map(|f| f.row.row.clone()).collect();
        write_figures(dir, &rows)
    }
}

/// One series per (topology, hidden) over x.
fn by_slice(
    rows: &[TrainRow],
    x: &dyn Fn(&TrainRow) -> f64,
    y: &dyn Fn(&TrainRow) -> f64,
) -> Series {
    let mut out: Series = Vec::new();
    for r in rows {
        let name = format!("{} h={}", r.topology, r.hidden);
        let point = (x(r), y(r));
        match out.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push(point),
            None => out.push((name, vec![point])),
        }
    }
    for s in &mut out {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// The three figures: the step stacked by component (cumulative lines
/// over the configurations in result order: compute, + exposed
/// communication, + bubble, + other idle = the step), MFU against TP × PP, and the
/// exposed communication share against TP × PP.
fn write_figures(dir: &Path, rows: &[TrainRow]) -> Result<Vec<String>, String> {
    let at = |i: usize| i as f64;
    let stacked: Series = vec![
        (
            "compute".into(),
            rows.iter()
                .enumerate()
                .map(|(i, r)| (at(i), r.compute_us))
                .collect(),
        ),
        (
            "+ exposed communication".into(),
            rows.iter()
                .enumerate()
                .map(|(i, r)| (at(i), r.compute_us + r.exposed_comm_us))
                .collect(),
        ),
        (
            "+ pipeline bubble".into(),
            rows.iter()
                .enumerate()
                .map(|(i, r)| (at(i), r.compute_us + r.exposed_comm_us + r.bubble_us))
                .collect(),
        ),
        (
            "+ other idle = step".into(),
            rows.iter()
                .enumerate()
                .map(|(i, r)| (at(i), r.step_us))
                .collect(),
        ),
    ];
    let tp_pp = |r: &TrainRow| f64::from(r.tp * r.pp);
    let figures = [
        (
            FILES[2],
            "configuration (results.csv row)",
            "time, us (stacked)",
            stacked,
        ),
        (
            FILES[3],
            "TP x PP",
            "MFU",
            by_slice(rows, &tp_pp, &|r| r.mfu),
        ),
        (
            FILES[4],
            "TP x PP",
            "exposed communication / step",
            by_slice(rows, &tp_pp, &|r| r.exposed_share),
        ),
    ];
    let mut files = Vec::new();
    for (file, x, y, series) in figures {
        chart(&dir.join(file), "Training step", x, y, false, &series)?;
        files.push(file.into());
    }
    Ok(files)
}

/// The table a train sweep prints: one line per point, times in µs.
pub fn table(rows: &[TrainRow]) -> String {
    let mut out = format!(
        "{:>16} {:>6} {:>3} {:>5} {:>3} {:>8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7}\n",
        "topology",
        "hidden",
        "L",
        "seq",
        "m",
        "dpxtpxpp",
        "net",
        "step(us)",
        "compute",
        "exposed",
        "bubble",
        "mfu",
        "exp%"
    );
    for r in rows {
        out += &format!(
            "{:>16} {:>6} {:>3} {:>5} {:>3} {:>8} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>7.4} {:>7.1}\n",
            r.topology,
            r.hidden,
            r.layers_per_stage,
            r.seq,
            r.micro_batches,
            format!("{}x{}x{}", r.dp, r.tp, r.pp),
            r.network_model,
            r.step_us,
            r.compute_us,
            r.exposed_comm_us,
            r.bubble_us,
            r.mfu,
            100.0 * r.exposed_share
        );
    }
    out
}
