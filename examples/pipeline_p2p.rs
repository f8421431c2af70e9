//! Two pipeline stages exchanging activations by isend/irecv (a GPipe
//! forward): rank 0 (stage 0) computes each micro-batch's activation with a
//! GEMM and sends it to rank 1 (stage 1), which receives it and runs its
//! own GEMM on it. With `isend` stage 0 goes on to its next GEMM while the
//! activation travels; with a blocking `send` it waits for the message
//! first. Prints, per micro-batch, when each stage's GEMM and the message
//! ran, and the forward's end in both modes.
//!
//! cargo run --release --example pipeline_p2p [-- MICROBATCHES [ROWS [K]]]

use kernbench::autotune::init_process_group;
use kernbench::ccl::CclConfig;
use kernbench::dist::{DPPolicy, Rank, Tensor};
use kernbench::gemm::matmul;
use kernbench::spec::System;
use kernbench::tp::replicated;
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

/// Columns of every activation.
const COLS: usize = 512;

/// (micro-batch, what, start tick, end tick), by rank.
type Events = Mutex<Vec<(u32, usize, &'static str, u64, u64)>>;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let micro: usize = args.next().map_or(Ok(4), |a| a.parse())?;
    let rows: usize = args.next().map_or(Ok(256), |a| a.parse())?;
    let k: usize = args.next().map_or(Ok(1024), |a| a.parse())?;
    let sys = System::embedded_default().with_sips(2)?;
    let cubes = sys.cubes_per_sip();
    println!(
        "# 2 pipeline stages (rank = SIP, {cubes} cubes each), {micro} micro-batches: ({rows} x {k}) . ({k} x {COLS}) on stage 0, ({rows} x {COLS}) . ({COLS} x {COLS}) on stage 1; ticks"
    );
    for blocking in [true, false] {
        let ccl = CclConfig::embedded_default();
        let mut pg = init_process_group(&sys, &ccl, "ring", DataMode::TimingOnly)?;
        let events: Events = Mutex::new(Vec::new());
        pg.spawn(2, |ctx| {
            let acts = (0..micro)
                .map(|_| ctx.empty((rows, COLS), DPPolicy::cube_rows(cubes)))
                .collect::<Result<Vec<Tensor>, _>>()?;
            if ctx.rank() == 0 {
                stage0(ctx, &acts, (rows, k), blocking, &events)
            } else {
                stage1(ctx, &acts, &events)
            }
        })?;
        let mut events = events.into_inner()?;
        events.sort_by_key(|e| (e.1, e.0, e.3));
        println!(
            "\n{}: forward ends at {}",
            if blocking { "send (blocking)" } else { "isend" },
            pg.machine.engine.now()
        );
        println!(
            "{:>5} {:>11} {:>6} {:>9} {:>9}",
            "rank", "micro-batch", "what", "start", "end"
        );
        for (rank, mb, what, start, end) in events {
            println!("{rank:>5} {mb:>11} {what:>6} {start:>9} {end:>9}");
        }
    }
    Ok(())
}

/// Stage 0: a GEMM per micro-batch, its activation sent to rank 1.
fn stage0(
    ctx: &mut Rank,
    acts: &[Tensor],
    (rows, k): (usize, usize),
    blocking: bool,
    events: &Events,
) -> Result<(), kernbench::dist::DistError> {
    let cubes = ctx.sip_shape().0;
    let x = ctx.parameter((rows, k), DPPolicy::cube_rows(cubes))?;
    let w = ctx.parameter((k, COLS), replicated(cubes))?;
    let mut sends = Vec::new();
    for (i, act) in acts.iter().enumerate() {
        let gemm = matmul(ctx, &x, &w, act)?;
        let ran = ctx.wait(&gemm)?;
        record(events, 0, i, "gemm", ran.start, ran.end);
        if blocking {
            let sent = ctx.send(act, 1)?;
            record(events, 0, i, "send", sent.start, sent.end);
        } else {
            sends.push((i, ctx.isend(act, 1)?));
        }
    }
    for (i, s) in sends {
        let sent = ctx.wait(&s)?;
        record(events, 0, i, "send", sent.start, sent.end);
    }
    Ok(())
}

/// Stage 1: every receive posted up front; each micro-batch's GEMM once
/// its activation has landed.
fn stage1(
    ctx: &mut Rank,
    acts: &[Tensor],
    events: &Events,
) -> Result<(), kernbench::dist::DistError> {
    let cubes = ctx.sip_shape().0;
    let w = ctx.parameter((COLS, COLS), replicated(cubes))?;
    let rows = acts[0].shape.0;
    let out = ctx.empty((rows, COLS), DPPolicy::cube_rows(cubes))?;
    let recvs = acts
        .iter()
        .map(|a| ctx.irecv(a, 0))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, (r, act)) in recvs.into_iter().zip(acts).enumerate() {
        ctx.wait(&r)?;
        let gemm = matmul(ctx, act, &w, &out)?;
        let ran = ctx.wait(&gemm)?;
        record(events, 1, i, "gemm", ran.start, ran.end);
    }
    Ok(())
}

fn record(events: &Events, rank: u32, mb: usize, what: &'static str, start: u64, end: u64) {
    if let Ok(mut e) = events.lock() {
        e.push((rank, mb, what, start, end));
    }
}
