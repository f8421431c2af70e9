//! One training step on a process group: every rank builds its stage,
//! runs its pipeline schedule, reduces its gradients over its DP group,
//! and hands back its record of works; the report is each rank's
//! breakdown over the step's common window and the model FLOP
//! utilisation.

use super::breakdown::RankBreakdown;
use super::dp::{DpReduce, DpReducer};
use super::layout::{Axis, Groups, Parallel, make_groups};
use super::schedule::{PipelineRank, Schedule, run_pipeline};
use super::stage::{Stage, UniformShape, UniformStage};
use super::transformer_stage::TransformerStage;
use crate::gemm::Placement;
use crate::tp::ModelParallel;
use crate::transformer::{LayerShape, LayerStack, TpOptions};
use kernbench_dist::{DistError, GroupId, ProcessGroup, Rank, WORLD, WorkClass, WorkRecord};
use kernbench_runtime::trace::ChromeTrace;
use kernbench_systems::Tick;
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

/// Which layers each stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// GPT layers ([`crate::transformer::LayerStack`]): attention and MLP,
    /// forward and backward, Megatron's TP split.
    Transformer,
    /// [`UniformStage`]: per layer one forward and two backward GEMMs.
    Uniform,
}

/// The names `Model::parse` takes.
pub const MODELS: [&str; 2] = ["transformer", "uniform"];

impl Model {
    pub fn parse(field: &str, s: &str) -> Result<Model, String> {
        match s {
            "transformer" => Ok(Model::Transformer),
            "uniform" => Ok(Model::Uniform),
            _ => Err(format!(
                "{field} '{s}' is not a model; allowed: {}",
                MODELS.join(", ")
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Model::Transformer => "transformer",
            Model::Uniform => "uniform",
        }
    }
}

/// The model's shape, as Megatron's arguments give it (`heads` and
/// `ffn_hidden` shape the transformer model; the uniform one has neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ModelShape {
    pub hidden: usize,
    pub heads: usize,
    pub ffn_hidden: usize,
    pub seq: usize,
    pub micro_batch: usize,
    pub layers_per_stage: usize,
}

/// One training step's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainStep {
    pub model: Model,
    pub shape: ModelShape,
    /// Sequence parallelism and recomputation (transformer model).
    pub tp_options: TpOptions,
    pub parallel: Parallel,
    pub schedule: Schedule,
    pub micro_batches: usize,
    pub dp_reduce: DpReduce,
    /// Bytes of gradients per DP bucket.
    pub bucket_bytes: u64,
    pub placement: Placement,
    pub seed: u64,
}

/// What one rank's step gave.
struct RankRun {
    rank: u32,
    window: (Tick, Tick),
    record: Vec<WorkRecord>,
    peak_in_flight: usize,
    forward_flops: u64,
    local_grads: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
}

/// A step's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainReport {
    /// From the first rank's start to the last rank's end, ticks.
    pub step: Tick,
    pub tick_ns: f64,
    /// The network model (`packet` or `flow`) and the compute model
    /// (`tiled` or `measured`) that produced it.
    pub network_model: &'static str,
    pub compute_model: &'static str,
    /// Each rank's breakdown over the step, by rank.
    pub ranks: Vec<RankBreakdown>,
    /// Most micro-batches' activations any rank kept at once.
    pub peak_activations: usize,
    /// Megatron's model FLOPs of the step: 3 × forward, over every rank.
    pub model_flops: u64,
    /// Peak FLOP/s of the SIPs the step runs on (2 FLOPs per MAC).
    pub peak_flops: f64,
    /// model FLOPs / (step time × peak).
    pub mfu: f64,
    /// Functional mode: by rank, each gradient before and after the DP
    /// reduction, in the order backward completed them.
    #[serde(skip)]
    pub local_grads: Vec<Vec<Vec<f32>>>,
    #[serde(skip)]
    pub grads: Vec<Vec<Vec<f32>>>,
    /// By rank, every work of the step (for the trace).
    #[serde(skip)]
    pub records: Vec<Vec<WorkRecord>>,
}

/// A step's breakdown in µs, each component the mean over ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub step_us: f64,
    pub compute_us: f64,
    pub exposed_us: f64,
    pub hidden_us: f64,
    pub bubble_us: f64,
    /// Idle time that is not the pipeline's: launch overhead, host waits.
    pub gaps_us: f64,
    /// Communication serialized: exposed + hidden.
    pub communication_us: f64,
    /// Each communication kind's time (`all_reduce`, `send`, …), by name.
    pub by_kind: Vec<(&'static str, f64)>,
}

impl TrainReport {
    /// The mean over ranks of each component, in µs.
    pub fn summary(&self) -> Summary {
        let us = |t: f64| t * self.tick_ns / 1e3;
        let n = self.ranks.len().max(1) as f64;
        let mean = |f: &dyn Fn(&RankBreakdown) -> u64| {
            us(self.ranks.iter().map(|b| f(b) as f64).sum::<f64>() / n)
        };
        let mut kinds: Vec<&'static str> = self
            .ranks
            .iter()
            .flat_map(|b| b.by_kind.keys().copied())
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        Summary {
            step_us: us(self.step as f64),
            compute_us: mean(&|b| b.compute),
            exposed_us: mean(&|b| b.exposed),
            hidden_us: mean(&|b| b.hidden),
            bubble_us: mean(&|b| b.bubble),
            gaps_us: mean(&|b| b.gaps),
            communication_us: mean(&|b| b.communication),
            by_kind: kinds
                .into_iter()
                .map(|k| (k, mean(&|b| b.by_kind.get(k).copied().unwrap_or(0))))
                .collect(),
        }
    }

    /// The report as pretty JSON: the step, every rank's breakdown, the
    /// peak activations, model FLOPs, peak and MFU.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

/// Writes a Chrome trace of the step at `path`: every rank's kernels on
/// its `compute` tracks and its collectives and messages on its
/// `communication` tracks (the "ranks" process). Returns the events
/// written.
pub fn write_trace(
    report: &TrainReport,
    pg: &ProcessGroup,
    path: &std::path::Path,
) -> Result<u64, String> {
    let mut trace = ChromeTrace::create(path, report.tick_ns)?;
    for (rank, record) in report.records.iter().enumerate() {
        for w in record {
            let kind = match w.class {
                WorkClass::Compute => "compute",
                _ => "communication",
            };
            trace.rank_work(rank as u32, kind, w.class.name(), w.start, w.end);
        }
    }
    trace.finish(&pg.machine)
}

impl TrainStep {
    /// Checks what the machine and the shapes allow, naming the field.
    pub fn check(&self, sips: u32, cubes: u32) -> Result<(), String> {
        self.parallel.check(sips)?;
        let (s, p) = (&self.shape, &self.parallel);
        let zero = [
            ("--hidden", s.hidden),
            ("--seq", s.seq),
            ("--micro-batch", s.micro_batch),
            ("--layers-per-stage", s.layers_per_stage),
            ("--micro-batches", self.micro_batches),
        ];
        if let Some((field, _)) = zero.iter().find(|f| f.1 == 0) {
            return Err(format!("{field} = 0; allowed: 1 or more"));
        }
        match self.model {
            Model::Uniform => self.check_uniform(cubes as usize)?,
            Model::Transformer => {
                let opts = &self.tp_options;
                crate::transformer::check(&self.layer_shape(), p.tp as usize, cubes as usize, opts)
                    .map_err(|e| e.to_string())?
            }
        }
        if self.schedule == Schedule::OneFOneB && self.micro_batches < p.pp as usize {
            return Err(format!(
                "--micro-batches {} < --pp {} under --schedule 1f1b: the pipeline never fills; allowed: --micro-batches >= {} (or --schedule gpipe)",
                self.micro_batches, p.pp, p.pp
            ));
        }
        Ok(())
    }
}

impl TrainStep {
    /// The uniform stage's splits: hidden over TP then the cubes, rows
    /// over the cubes; no sequence parallelism or recomputation to model.
    fn check_uniform(&self, cubes: usize) -> Result<(), String> {
        let (s, p) = (&self.shape, &self.parallel);
        if self.tp_options != TpOptions::default() {
            return Err(
                "--sequence-parallel and --recompute shape the transformer model's layers; the uniform model has neither; allowed: --model transformer, or drop them".into(),
            );
        }
        let split = (cubes * p.tp as usize).max(cubes);
        if !s.hidden.is_multiple_of(split) || !(s.hidden / p.tp as usize).is_multiple_of(cubes) {
            return Err(format!(
                "--hidden {} does not split over --tp {} and then the {cubes} cubes of a SIP (sip.cube_mesh); allowed: a multiple of {}",
                s.hidden,
                p.tp,
                cubes * p.tp as usize
            ));
        }
        let rows = s.seq * s.micro_batch;
        if !rows.is_multiple_of(cubes) {
            return Err(format!(
                "--seq × --micro-batch = {rows} rows do not split over the {cubes} cubes of a SIP (sip.cube_mesh); allowed: a product that is a multiple of {cubes}"
            ));
        }
        Ok(())
    }

    /// One layer's shape for the transformer model.
    pub fn layer_shape(&self) -> LayerShape {
        LayerShape {
            hidden: self.shape.hidden,
            heads: self.shape.heads,
            ffn_hidden: self.shape.ffn_hidden,
            seq: self.shape.seq,
            micro_batch: self.shape.micro_batch,
        }
    }
}

/// Runs one training step on `pg` (its machine in `mode`).
pub fn train_step(
    pg: &mut ProcessGroup,
    step: &TrainStep,
    mode: DataMode,
) -> Result<TrainReport, DistError> {
    let (sips, cubes) = (
        pg.machine.system.spec.system.sips.count,
        pg.machine.topology.cubes_per_sip(),
    );
    step.check(sips, cubes).map_err(DistError::Config)?;
    let groups = make_groups(pg, &step.parallel)?;
    let mp = tensor_parallel(step, &groups);
    let out = Mutex::new(Vec::new());
    // Ranks past dp × tp × pp (a layout that divides the SIPs without
    // filling them) sit the step out.
    let world = pg.world_size;
    pg.spawn(world, |ctx| {
        let me = ctx.rank();
        if me >= step.parallel.world() {
            return Ok(());
        }
        let run = rank_step(ctx, step, (groups.dp[me as usize], &mp, mode))?;
        out.lock()
            .map_err(|_| DistError::Run("a rank panicked holding the results".into()))?
            .push(run);
        Ok(())
    })?;
    let mut runs = out.into_inner().unwrap_or_else(|e| e.into_inner());
    runs.sort_by_key(|r| r.rank);
    Ok(report(pg, step, runs))
}

/// The step's TP groups as the transformer layers take them (at TP 1 a
/// rank runs no TP collective: its group is the world's, never used).
fn tensor_parallel(step: &TrainStep, groups: &Groups) -> ModelParallel {
    let l = step.parallel;
    let by_rank = (0..l.world())
        .map(|r| (l.coord(r, Axis::Tp), groups.tp[r as usize].unwrap_or(WORLD)))
        .collect();
    let mut mp = ModelParallel::of_groups(l.tp, by_rank);
    mp.placement = step.placement.clone();
    mp
}

/// What a rank's pipeline stage is made of, and its seeds: weights by
/// (stage, TP place), data by DP replica (replicas share weights and see
/// different data).
fn build_stage(
    ctx: &mut Rank,
    step: &TrainStep,
    (mp, mode): (&ModelParallel, DataMode),
    (weight_seed, data_seed): (u64, u64),
) -> Result<Box<dyn Stage>, DistError> {
    let l = step.parallel;
    Ok(match step.model {
        Model::Uniform => {
            let shape = UniformShape {
                rows: step.shape.seq * step.shape.micro_batch,
                hidden: step.shape.hidden,
                layers: step.shape.layers_per_stage,
                tp: l.tp as usize,
            };
            let seeds = (weight_seed, data_seed);
            Box::new(UniformStage::new(
                ctx,
                shape,
                step.placement.clone(),
                seeds,
                mode,
            )?)
        }
        Model::Transformer => {
            let layers = step.shape.layers_per_stage;
            let opts = step.tp_options;
            let stack = LayerStack::new(
                ctx,
                step.layer_shape(),
                layers,
                mp.clone(),
                opts,
                weight_seed,
            )?;
            Box::new(TransformerStage { stack, tp: l.tp })
        }
    })
}

fn rank_step(
    ctx: &mut Rank,
    step: &TrainStep,
    (dp_group, mp, mode): (Option<GroupId>, &ModelParallel, DataMode),
) -> Result<RankRun, DistError> {
    let (me, l) = (ctx.rank(), step.parallel);
    let (stage_no, dp_no) = (l.coord(me, Axis::Pp), l.coord(me, Axis::Dp));
    let tp_no = l.coord(me, Axis::Tp);
    let neighbour = |s: u32| l.rank_at(dp_no, tp_no, s);
    let data_seed = step
        .seed
        .wrapping_add(1 + u64::from(dp_no) * 7919 + u64::from(stage_no));
    let weight_seed = step.seed ^ (u64::from(stage_no) << 32 | u64::from(tp_no) << 16);
    let plan = PipelineRank {
        schedule: step.schedule,
        stage: stage_no,
        stages: l.pp,
        micro_batches: step.micro_batches,
        prev: (stage_no > 0).then(|| neighbour(stage_no - 1)),
        next: (stage_no + 1 < l.pp).then(|| neighbour(stage_no + 1)),
        data_seed: (mode == DataMode::Functional).then_some(data_seed),
    };
    let mut stage = build_stage(ctx, step, (mp, mode), (weight_seed, data_seed))?;
    let functional = mode == DataMode::Functional;
    let mut dp = DpReducer::new(dp_group, step.dp_reduce, step.bucket_bytes, functional);
    ctx.record_works()?;
    let begin = ctx.now();
    let ran = run_pipeline(ctx, stage.as_mut(), &plan, &mut |c, g| dp.ready(c, g))?;
    let local_grads = dp.finish(ctx)?.unwrap_or_default();
    let end = ctx.now();
    let record = ctx.take_work_record()?;
    let grads = if functional {
        stage
            .grads()
            .iter()
            .map(|g| ctx.read(g))
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let forward_flops = stage.forward_flops();
    for t in ran.tensors {
        ctx.free(t)?;
    }
    stage.free(ctx)?;
    Ok(RankRun {
        rank: me,
        window: (begin, end),
        record,
        peak_in_flight: ran.peak_in_flight,
        forward_flops,
        local_grads,
        grads,
    })
}

fn report(pg: &ProcessGroup, step: &TrainStep, runs: Vec<RankRun>) -> TrainReport {
    let begin = runs.iter().map(|r| r.window.0).min().unwrap_or(0);
    let end = runs.iter().map(|r| r.window.1).max().unwrap_or(begin);
    let spec = &pg.machine.system.spec;
    let tick_ns = spec.system.tick_ns;
    let macs = u64::from(pg.machine.topology.cubes_per_sip())
        * u64::from(pg.machine.topology.pes_per_cube)
        * spec.pe.macs_per_tick;
    let peak_flops = 2.0 * macs as f64 * f64::from(step.parallel.world()) / (tick_ns * 1e-9);
    let model_flops: u64 = runs
        .iter()
        .map(|r| 3 * r.forward_flops * step.micro_batches as u64)
        .sum();
    let seconds = (end - begin) as f64 * tick_ns * 1e-9;
    TrainReport {
        step: end - begin,
        tick_ns,
        network_model: spec.network.model.name(),
        compute_model: spec.simulation.compute_model().name(),
        ranks: runs
            .iter()
            .map(|r| RankBreakdown::of(r.rank, &r.record, (begin, end)))
            .collect(),
        peak_activations: runs.iter().map(|r| r.peak_in_flight).max().unwrap_or(0),
        model_flops,
        peak_flops,
        mfu: if seconds > 0.0 {
            model_flops as f64 / (seconds * peak_flops)
        } else {
            0.0
        },
        local_grads: runs.iter().map(|r| r.local_grads.clone()).collect(),
        grads: runs.iter().map(|r| r.grads.clone()).collect(),
        records: runs.into_iter().map(|r| r.record).collect(),
    }
}
