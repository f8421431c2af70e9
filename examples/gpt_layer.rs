//! One GPT layer's forward and backward under Megatron TP on the default
//! system (4 SIPs of 16 cubes), timing only: prints rank 0's simulated
//! forward and backward times and the wall time of the run.
//!
//! cargo run --release --example gpt_layer [-- HIDDEN [SEQ [TP [sp] [recompute]]]]

use kernbench::ccl::CclConfig;
use kernbench::dist::init_process_group;
use kernbench::spec::System;
use kernbench::tp::initialize_model_parallel;
use kernbench::transformer::{LayerShape, LayerStack, TpOptions};
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let hidden: usize = args.next().map_or(Ok(4096), |a| a.parse())?;
    let seq: usize = args.next().map_or(Ok(2048), |a| a.parse())?;
    let tp: u32 = args.next().map_or(Ok(4), |a| a.parse())?;
    let rest: Vec<String> = args.collect();
    let opts = TpOptions {
        sequence_parallel: rest.iter().any(|a| a == "sp"),
        recompute: rest.iter().any(|a| a == "recompute"),
    };
    let shape = LayerShape {
        hidden,
        heads: hidden / 128,
        ffn_hidden: 4 * hidden,
        seq,
        micro_batch: 1,
    };
    let sys = System::embedded_default();
    let wall = std::time::Instant::now();
    let mut pg = init_process_group(
        &sys,
        &CclConfig::embedded_default(),
        "ring",
        DataMode::TimingOnly,
    )?;
    let mp = initialize_model_parallel(&mut pg, tp)?;
    let times = Mutex::new((0, 0));
    pg.spawn(tp, |ctx| {
        let mut stack = LayerStack::new(ctx, shape, 1, mp.clone(), opts, 0)?;
        let x = stack.activation(ctx)?;
        let dy = stack.activation(ctx)?;
        let t0 = ctx.now();
        stack.forward(ctx, 0, &x)?;
        let t1 = ctx.now();
        stack.backward(ctx, 0, &dy)?;
        let t2 = ctx.now();
        if ctx.rank() == 0 {
            *times.lock().unwrap() = (t1 - t0, t2 - t1);
        }
        Ok(())
    })?;
    let (f, b) = times.into_inner().unwrap();
    let ns = sys.spec.system.tick_ns;
    println!(
        "h {hidden} s {seq} TP {tp} {opts:?}: forward {:.1} us, backward {:.1} us (rank 0); wall {:.2} s",
        f as f64 * ns / 1e3,
        b as f64 * ns / 1e3,
        wall.elapsed().as_secs_f64()
    );
    Ok(())
}
