//! One rank's pipeline schedule: 1F1B (warm-up forwards, then one forward
//! and one backward in turn, then the cool-down backwards) or GPipe (every
//! forward, then every backward), activations and their gradients passed
//! between neighbouring stages with `isend`/`irecv`.

use super::stage::{GradReady, Stage};
use kernbench_dist::{DistError, Rank, Tensor, Work};
use kernbench_runtime::seeded;

/// The order of a stage's forwards and backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Narayanan et al.'s one-forward-one-backward: stage s of p runs
    /// p − 1 − s warm-up forwards; at most p − s micro-batches in flight.
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Every forward, then every backward: m micro-batches in flight.
    GPipe,
}

/// The names `Schedule::parse` takes.
pub const SCHEDULES: [&str; 2] = ["1f1b", "gpipe"];

impl Schedule {
    /// Parses `1f1b` or `gpipe`; `field` names the flag or plan field.
    pub fn parse(field: &str, s: &str) -> Result<Schedule, String> {
        match s {
            "1f1b" => Ok(Schedule::OneFOneB),
            "gpipe" => Ok(Schedule::GPipe),
            _ => Err(format!(
                "{field} '{s}' is not a pipeline schedule; allowed: {}",
                SCHEDULES.join(", ")
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Schedule::OneFOneB => "1f1b",
            Schedule::GPipe => "gpipe",
        }
    }

    /// Forwards stage `stage` of `stages` runs before its first backward.
    pub fn warmup(self, stage: u32, stages: u32, micro: usize) -> usize {
        match self {
            Schedule::OneFOneB => ((stages - 1 - stage) as usize).min(micro),
            Schedule::GPipe => micro,
        }
    }
}

/// One rank's place in the pipeline.
#[derive(Debug, Clone)]
pub struct PipelineRank {
    pub schedule: Schedule,
    pub stage: u32,
    pub stages: u32,
    pub micro_batches: usize,
    /// The ranks of the previous and next stage (same DP and TP place).
    pub prev: Option<u32>,
    pub next: Option<u32>,
    /// Functional mode: the seed of the first stage's inputs and the last
    /// stage's output gradients (None: timing only, no values).
    pub data_seed: Option<u64>,
}

/// What a rank's schedule kept.
pub struct Ran {
    /// Most micro-batches whose forward ran and backward had not, at once.
    pub peak_in_flight: usize,
    /// Tensors to give back once the step is over.
    pub tensors: Vec<Tensor>,
}

struct Run<'a> {
    plan: &'a PipelineRank,
    /// What the stage takes and hands on.
    activation: ((usize, usize), kernbench_dist::DPPolicy),
    sends: Vec<Work>,
    /// The send of the last input gradient: waited before the next
    /// backward, which may reuse its buffer.
    gradient_send: Option<Work>,
    tensors: Vec<Tensor>,
    in_flight: usize,
    peak: usize,
}

impl Run<'_> {
    /// A received (or, on the first and last stage, a fresh) activation.
    fn receive(&mut self, ctx: &mut Rank, from: Option<u32>) -> Result<Tensor, DistError> {
        let (shape, policy) = self.activation;
        let t = ctx.empty(shape, policy)?;
        match (from, self.plan.data_seed) {
            (Some(src), _) => {
                let w = ctx.irecv(&t, src)?;
                ctx.wait(&w)?;
            }
            (None, Some(seed)) => {
                let seed = seed.wrapping_add(self.tensors.len() as u64);
                ctx.write(&t, &seeded::uniform(seed, t.elems()))?;
            }
            (None, None) => {}
        }
        self.tensors.push(t.clone());
        Ok(t)
    }

    /// Sends a tensor of the stage's on (it stays the stage's).
    fn send(
        &mut self,
        ctx: &mut Rank,
        t: &Tensor,
        to: Option<u32>,
    ) -> Result<Option<Work>, DistError> {
        let Some(dst) = to else {
            return Ok(None);
        };
        ctx.isend(t, dst).map(Some)
    }

    fn forward(
        &mut self,
        ctx: &mut Rank,
        stage: &mut dyn Stage,
        i: usize,
    ) -> Result<(), DistError> {
        let x = self.receive(ctx, self.plan.prev)?;
        let y = stage.forward(ctx, i, &x)?;
        self.in_flight += 1;
        self.peak = self.peak.max(self.in_flight);
        let sent = self.send(ctx, &y, self.plan.next)?;
        self.sends.extend(sent);
        Ok(())
    }

    fn backward(
        &mut self,
        ctx: &mut Rank,
        stage: &mut dyn Stage,
        i: usize,
        ready: &mut GradReady,
    ) -> Result<(), DistError> {
        let dy = self.receive(ctx, self.plan.next)?;
        let last = i + 1 == self.plan.micro_batches;
        if let Some(w) = self.gradient_send.take() {
            ctx.wait(&w)?;
        }
        let dx = stage.backward(ctx, i, &dy, last.then_some(ready))?;
        self.in_flight -= 1;
        self.gradient_send = self.send(ctx, &dx, self.plan.prev)?;
        Ok(())
    }
}

/// Runs `plan` on this rank's `stage`: every forward and backward, `ready`
/// given each weight gradient of the last micro-batch's backward; returns
/// once every message this rank sent has landed.
pub fn run_pipeline(
    ctx: &mut Rank,
    stage: &mut dyn Stage,
    plan: &PipelineRank,
    ready: &mut GradReady,
) -> Result<Ran, DistError> {
    let m = plan.micro_batches;
    let warmup = plan.schedule.warmup(plan.stage, plan.stages, m);
    let mut run = Run {
        plan,
        activation: stage.activation(),
        sends: Vec::new(),
        gradient_send: None,
        tensors: Vec::new(),
        in_flight: 0,
        peak: 0,
    };
    for i in 0..warmup {
        run.forward(ctx, stage, i)?;
    }
    for i in 0..m - warmup {
        run.forward(ctx, stage, warmup + i)?;
        run.backward(ctx, stage, i, ready)?;
    }
    for i in m - warmup..m {
        run.backward(ctx, stage, i, ready)?;
    }
    let gradient_send = run.gradient_send.take();
    for w in std::mem::take(&mut run.sends)
        .into_iter()
        .chain(gradient_send)
    {
        ctx.wait(&w)?;
    }
    Ok(Ran {
        peak_in_flight: run.peak,
        tensors: run.tensors,
    })
}
