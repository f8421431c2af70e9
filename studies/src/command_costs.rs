//! What each command's work costs, part by part, from the same per-run
//! model as `run` (docs/model.md §Cost estimate), so that `autotune`,
//! `tp-mlp`, `gemm-sweep`, `bench` and the process group pass one budget
//! before they start. Sizes from user numbers are multiplied as f64: an
//! absurd request gives an absurd estimate, never an overflow.

use crate::gemm::sweep::Shape;
use crate::tp::mlp::MlpShape;
use kernbench_ccl::estimate::{
    Cost, Estimate, SCHEDULE_RUNS_PER_MESSAGE, SECONDS_PER_MESSAGE, SECONDS_PER_PACKET_HOP,
    SECONDS_PER_SCHEDULE_RUN,
};
use kernbench_ccl::{AlgoConfig, Collective, Communicator, Job, ReduceOp, algorithms};
use kernbench_dist::process_group_estimate;
use kernbench_spec::spec::{ComputeModel, System};

/// Wall time per raw message and per packet-hop of bench's ring traffic
/// (no ops, credits or loads; its default, 3.4e7 messages and 6.7e8 hops,
/// takes 4.0 to 5.2 s).
const TRAFFIC_SECONDS_PER_MESSAGE: f64 = 60e-9;
const TRAFFIC_SECONDS_PER_HOP: f64 = 3e-9;
/// Wall time per multiply-accumulate of a simulated GEMM, timing only
/// (gemm-sweep's default grid, 1.2e11 MACs: 0.6 s on 2 threads).
const SECONDS_PER_GEMM_MAC: f64 = 1e-11;
/// Wall time per PE of each replayed launch of a training step under
/// measured compute, its communication included (DP 2 × TP 4 × PP 2 of a
/// GPT layer at hidden 4096, seq 2048, 8 micro-batches on mesh_16: 1.6e6
/// PE launches in 33 s).
const SECONDS_PER_MEASURED_PE_LAUNCH: f64 = 20e-6;
/// The same with values (tp-mlp runs functional: every product computed),
/// and per multiply-accumulate of its f32 host reference, whose strided
/// reads miss the cache on wide weights (tp-mlp --batch 64: 25.7 s for
/// 5.4e8 simulated and 1.3e9 reference MACs; batch 16, 2048 → 8192 → 2048,
/// TP 2: 54.6 s for the same counts).
const SECONDS_PER_FUNCTIONAL_MAC: f64 = 2e-8;
const SECONDS_PER_HOST_MAC: f64 = 2e-8;
/// Wall time per rank of a tp-mlp run besides its MACs: its functional
/// share of the machine, its layers' seeded weights (batch 1: 3.6 s for
/// TP 1, 2, 4 and 8, 15 ranks).
const SECONDS_PER_MLP_RANK: f64 = 0.2;
/// Bytes per f32 value held on the host or in functional memory.
const BYTES_PER_VALUE: f64 = 4.0;

/// Adds the time of `messages` and `packet_hops` to `e`, with the schedule
/// runs of `lockstep` participants acting on the same ticks.
fn timed(mut e: Estimate, messages: f64, packet_hops: f64, lockstep: f64) -> Estimate {
    e.messages += messages;
    e.packet_hops += packet_hops;
    e.schedule_runs += messages * SCHEDULE_RUNS_PER_MESSAGE / lockstep.max(1.0);
    e.seconds += messages * SECONDS_PER_MESSAGE
        + packet_hops * SECONDS_PER_PACKET_HOP
        + messages * SCHEDULE_RUNS_PER_MESSAGE / lockstep.max(1.0) * SECONDS_PER_SCHEDULE_RUN;
    e
}

/// Link hops of a packet from a PE to a PE of the next SIP: the NoC of
/// both cubes, the inter-SIP link and its ports.
fn next_sip_hops(sys: &System) -> f64 {
    f64::from(sys.spec.cube.noc_mesh.w + sys.spec.cube.noc_mesh.h) + 4.0
}

/// `autotune`: every candidate that runs `collective` on this system, at
/// each distinct bucket of `sizes`, one simulation each.
pub fn autotune(
    sys: &System,
    candidates: &[AlgoConfig],
    collective: Collective,
    sizes: &[u64],
) -> Cost {
    let topology = sys.spec.system.sips.topology;
    let mut cost = Cost::default();
    for b in crate::autotune::report::buckets(sizes) {
        let job = Job {
            collective,
            op: ReduceOp::Sum,
            elems: usize::try_from(b / 2).unwrap_or(usize::MAX),
        };
        for c in candidates {
            let runs_here = algorithms::find(&c.algorithm)
                .is_ok_and(|a| a.topologies().contains(&topology))
                && Communicator::check_before_build(sys, c, &job).is_ok();
            if runs_here {
                let e = Estimate::collective(sys, c, &job, false, false);
                cost.add(format!("{} at {b} B", c.name), e);
            }
        }
    }
    cost
}

/// The buckets of `sizes` that `tuner` would simulate on `sys`'s whole
/// machine: those without a trustworthy decision in `cache` (every one with
/// `retune`), so that cached work costs nothing.
pub fn buckets_to_tune(
    sys: &System,
    tuner: &crate::autotune::Tuner,
    (cache, retune): (&std::path::Path, bool),
    collective: Collective,
    sizes: &[u64],
) -> Vec<u64> {
    use crate::autotune::cache::{Cache, Lookup};
    let cache = Cache::new(cache);
    let group = kernbench_ccl::Group::new(sys);
    crate::autotune::report::buckets(sizes)
        .into_iter()
        .filter(|&b| {
            retune
                || !matches!(
                    cache.get(&tuner.cache_key(collective, &group, b)),
                    Lookup::Hit(_)
                )
        })
        .collect()
}

/// A collective of `job` on `sys` under ccl entry `config`: its run and
/// the seconds of tuning it first. Under `auto` the tuning simulates every
/// candidate of `ccl` that runs it here, one after the other, each on a
/// machine of its own, and the costliest candidate stands for the pick (as
/// for a sweep's auto point); a fixed entry tunes nothing.
fn collective_and_tuning(
    sys: &System,
    ccl: &kernbench_ccl::CclConfig,
    config: &AlgoConfig,
    job: &Job,
    verify: bool,
) -> (Estimate, f64) {
    if config.algorithm != kernbench_ccl::AUTO {
        return (Estimate::collective(sys, config, job, verify, false), 0.0);
    }
    let tuning = autotune(sys, &ccl.candidates, job.collective, &[job.bytes()]);
    let run = ccl
        .candidates
        .iter()
        .map(|c| Estimate::collective(sys, c, job, verify, false))
        .max_by(|a, b| a.seconds.total_cmp(&b.seconds))
        .unwrap_or_else(|| Estimate::build(sys));
    (run, tuning.seconds())
}

/// `tp-mlp`: per TP size, a functional process group of TP × `dp` SIPs,
/// both layers' GEMMs with values, `dp` all-reduces over TP SIPs, and the
/// f32 host reference. Errors name `--tp`/`--dp` when their product is
/// not a system.
pub fn tp_mlp(
    base: &System,
    ccl: &kernbench_ccl::CclConfig,
    config: &AlgoConfig,
    tps: &[u32],
    dp: u32,
    shape: MlpShape,
) -> Result<Cost, String> {
    let MlpShape {
        batch,
        d_in,
        d_hidden,
        d_out,
    } = shape;
    let (b, din, dh, dout) = (batch as f64, d_in as f64, d_hidden as f64, d_out as f64);
    let mut cost = Cost::default();
    for &tp in tps {
        let world = tp
            .checked_mul(dp)
            .ok_or_else(|| format!("--tp {tp} x --dp {dp} ranks is more than {} SIPs", u32::MAX))?;
        let sys = base
            .with_sips(world)
            .map_err(|e| format!("--tp {tp} x --dp {dp} = {world} SIPs: {e}"))?;
        let mut e = process_group_estimate(&sys, world);
        let replicas = f64::from(dp);
        if tp > 1 {
            let group = base.with_sips(tp).map_err(|e| format!("--tp {tp}: {e}"))?;
            let elems = batch.saturating_mul(d_out).min(1 << 40);
            let job = Job {
                collective: Collective::AllReduce,
                op: ReduceOp::Sum,
                elems,
            };
            let (ar, tuning) = collective_and_tuning(&group, ccl, config, &job, true);
            let run_bytes = ar.peak_bytes - Estimate::build(&group).peak_bytes;
            e = timed(e, ar.messages * replicas, ar.packet_hops * replicas, 1.0);
            e.seconds += tuning;
            e.peak_bytes += run_bytes * replicas;
        }
        let layer_macs = b * (din * dh + dh * dout);
        let reference_macs = b * (2.0 * din * dh + 3.0 * dh * dout);
        e.seconds += replicas * layer_macs * SECONDS_PER_FUNCTIONAL_MAC
            + reference_macs * SECONDS_PER_HOST_MAC
            + f64::from(world) * SECONDS_PER_MLP_RANK;
        // Weights (every replica's shards), each rank's activations and
        // output, the reference's matrices and bounds.
        let values = replicas * (din * dh + dh * dout)
            + f64::from(world) * b * (din + dh / f64::from(tp.max(1)) + 2.0 * dout)
            + (din * dh + dh * dout)
            + b * (din + 2.0 * dh + 3.0 * dout);
        e.peak_bytes += values * BYTES_PER_VALUE;
        cost.add(format!("tp {tp} ({world} ranks)"), e);
    }
    Ok(cost)
}

/// `sweep` of a TP plan (`workload: tp_block`): per point a timing-only
/// process group of TP SIPs, the block's GEMMs (QKV 3h², output h², MLP
/// 8h² MACs per token) and its two all-reduces of tokens × hidden values
/// over the TP SIPs.
pub fn tp_study(plan: &crate::tp::study::TpPlan, base: &System) -> Result<Cost, String> {
    let base = plan.base_system(base)?;
    let ccl = kernbench_ccl::CclConfig::embedded_default();
    let config = ccl
        .entry(&plan.algorithm)
        .map_err(|(p, a)| format!("algorithm: {p}; allowed: {a}"))?;
    let mut cost = Cost::default();
    for (topology, hidden, tp) in plan.points() {
        let what = format!("{} x{tp}, hidden {hidden}", topology.name());
        let mut spec = base.spec.clone();
        spec.system.sips.topology = topology;
        let sys = System::from_spec(spec, &base.origin)
            .and_then(|s| s.with_sips(tp))
            .map_err(|e| format!("{what}: {e}"))?;
        let (h, tokens) = (hidden as f64, plan.tokens as f64);
        let mut e = process_group_estimate(&sys, tp);
        e.seconds += 12.0 * h * h * tokens * SECONDS_PER_GEMM_MAC;
        if tp > 1 {
            let job = Job {
                collective: Collective::AllReduce,
                op: ReduceOp::Sum,
                elems: plan.tokens.saturating_mul(hidden).min(1 << 40),
            };
            let build = Estimate::build(&sys);
            // Two all-reduces of one size: under auto, tuned once.
            let (ar, tuning) = collective_and_tuning(&sys, &ccl, config, &job, false);
            e.seconds += 2.0 * (ar.seconds - build.seconds) + tuning;
            e.peak_bytes += ar.peak_bytes - build.peak_bytes;
        }
        cost.add(what, e);
    }
    Ok(cost)
}

/// One training step on `sys`: its process group and its GEMMs (3 × the
/// forward's MACs per micro-batch on every rank of the layout).
pub fn train_step(sys: &System, step: &crate::train::TrainStep) -> Estimate {
    let s = &step.shape;
    let rows = (s.seq * s.micro_batch) as f64;
    let (h, par) = (s.hidden as f64, step.parallel);
    // A layer's forward MACs: one GEMM, or a GPT layer's QKV and output
    // projections, attention scores and context, and MLP.
    let forward = match step.model {
        crate::train::Model::Uniform => rows * h * h,
        crate::train::Model::Transformer => {
            let (seq, f) = (s.seq as f64, s.ffn_hidden as f64);
            4.0 * rows * h * h + 2.0 * rows * seq * h + 2.0 * rows * h * f
        }
    };
    let passes = if step.tp_options.recompute { 4.0 } else { 3.0 };
    let layers = s.layers_per_stage as f64;
    let macs_per_rank = passes * forward / f64::from(par.tp.max(1)) * layers;
    let ranks = f64::from(par.dp) * f64::from(par.tp) * f64::from(par.pp);
    let mut e = process_group_estimate(sys, sys.spec.system.sips.count);
    let micro_batches = step.micro_batches as f64;
    if sys.spec.simulation.compute_model() == ComputeModel::Tiled {
        e.seconds += macs_per_rank * ranks * micro_batches * SECONDS_PER_GEMM_MAC;
        return e;
    }
    // Measured: each kernel of one micro-batch simulated once, on a second
    // machine; then every launch replayed, with the communication.
    let launches_per_layer = match step.model {
        crate::train::Model::Uniform => passes,
        crate::train::Model::Transformer => {
            let local_heads = (s.heads / par.tp.max(1) as usize).max(1) as f64;
            passes * (10.0 + 3.0 * local_heads)
        }
    };
    let pes = f64::from(sys.cubes_per_sip() * sys.pes_per_cube());
    let replayed = ranks * micro_batches * layers * launches_per_layer * pes;
    e.peak_bytes += Estimate::build(sys).peak_bytes;
    e.seconds += macs_per_rank * SECONDS_PER_GEMM_MAC + replayed * SECONDS_PER_MEASURED_PE_LAUNCH;
    e
}

/// Under tiled compute, the seconds [`train_step`] estimates for the same
/// step under measured compute; `None` when it is measured already.
pub fn train_step_measured_seconds(sys: &System, step: &crate::train::TrainStep) -> Option<f64> {
    if sys.spec.simulation.compute_model() != ComputeModel::Tiled {
        return None;
    }
    let mut measured = sys.clone();
    measured.spec.simulation.compute = Some(ComputeModel::Measured);
    Some(train_step(&measured, step).seconds)
}

/// `sweep` of a train plan: [`train_step`] per point.
pub fn train_study(plan: &crate::train::study::TrainPlan, base: &System) -> Result<Cost, String> {
    let base = plan.base_system(base)?;
    let mut cost = Cost::default();
    for p in plan.points() {
        let sys = plan.system(&base, &p)?;
        let step = plan.step(&p, sys.pes_per_cube())?;
        cost.add(
            crate::sweep::study::StudyPoint::label(&p),
            train_step(&sys, &step),
        );
    }
    Ok(cost)
}

/// `gemm-sweep`: each shape on a process group of the one-SIP system
/// `one_sip`, timing only, `parallel` shapes at a time (their memory adds up).
pub fn gemm_sweep(one_sip: &System, shapes: &[Shape], parallel: usize) -> Cost {
    let mut cost = Cost::default();
    for s in shapes {
        let mut e = process_group_estimate(one_sip, 1);
        e.peak_bytes *= parallel.clamp(1, shapes.len().max(1)) as f64;
        e.seconds += s.m as f64 * s.k as f64 * s.n as f64 * SECONDS_PER_GEMM_MAC;
        cost.add(format!("{} {}x{}x{}", s.family, s.m, s.k, s.n), e);
    }
    cost
}

/// `bench`'s ring traffic: each SIP sends `bytes` to its neighbour per
/// round, `rounds` rounds, every SIP in step.
pub fn ring_traffic(sys: &System, rounds: u64, bytes: u64) -> Estimate {
    let sips = f64::from(sys.n_sips());
    let packet = sys.spec.links.inter_sip.packet_bytes as f64;
    let mut e = Estimate::build(sys);
    e.messages = sips * rounds as f64;
    e.packet_hops = e.messages * (bytes as f64 / packet).ceil().max(1.0) * next_sip_hops(sys);
    e.seconds += e.messages * TRAFFIC_SECONDS_PER_MESSAGE + e.packet_hops * TRAFFIC_SECONDS_PER_HOP;
    e
}

/// `bench`'s ring kernel: per round each PE sends `bytes` east in slots of
/// `slot_bytes` (a chunk and a credit each), receives and adds.
pub fn ring_kernel(sys: &System, rounds: u64, bytes: u64, slot_bytes: u64) -> Estimate {
    let sips = f64::from(sys.n_sips());
    let chunks = sips * rounds as f64 * (bytes as f64 / slot_bytes.max(1) as f64).ceil();
    let packet = sys.spec.links.inter_sip.packet_bytes as f64;
    let per_chunk = (bytes.min(slot_bytes) as f64 / packet).ceil().max(1.0);
    let mut e = timed(
        Estimate::build(sys),
        2.0 * chunks,
        chunks * per_chunk * next_sip_hops(sys),
        sips,
    );
    e.ops = 3.0 * chunks;
    e
}
