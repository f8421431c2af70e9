//! The seed's tensor-parallel MLP written against the library (ADR-0027
//! D6): two ranks, fc1 column-parallel, fc2 row-parallel, seeded weights;
//! prints rank 0's output head, its max error against a single-device f32
//! reference, its time breakdown and the configuration its all-reduce ran
//! (`auto`: the autotuner's pick, as `kernbench tp-mlp` by default).
//!
//! Run: cargo run --release --example tp_mlp

use kernbench::autotune::init_process_group;
use kernbench::ccl::CclConfig;
use kernbench::spec::System;
use kernbench::tp::{
    self, BiasPolicy, ColumnParallelLinear, RowParallelLinear, Timeline, seeded_matrix,
};
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (batch, d_in, d_hidden, d_out) = (4, 512, 2048, 512);
    let sys = System::embedded_default().with_sips(2)?;
    let cubes = sys.cubes_per_sip();
    let mut pg = init_process_group(
        &sys,
        &CclConfig::embedded_default(),
        "auto",
        DataMode::Functional,
    )?;
    let mp = tp::initialize_model_parallel(&mut pg, 2)?;
    let x = kernbench::seeded::uniform(1, batch * d_in);
    let out = Mutex::new(None);
    pg.spawn(2, |ctx| {
        // Each rank builds its slices of the same seeded weights.
        let fc1 = ColumnParallelLinear::new(ctx, &mp, (d_in, d_hidden), false, Some(10))?;
        let fc2 = RowParallelLinear::new(
            ctx,
            &mp,
            (d_hidden, d_out),
            Some(BiasPolicy::Rank0),
            Some(20),
        )?;
        let input = ctx.empty((batch, d_in), tp::replicated(cubes))?;
        ctx.write(&input, &x)?;
        let mut time = Timeline::start(ctx);
        let h = fc1.forward(ctx, tp::copy_to(&input), &mut time)?;
        let y = fc2.forward(ctx, &mp, &h, &mut time)?;
        if ctx.rank() == 0 {
            let ran = time.collective_configs().join("+");
            *out.lock().unwrap() = Some((ctx.read(&y)?, time.breakdown(ctx), ran));
        }
        Ok(())
    })?;
    let (y, b, ran) = out.into_inner().unwrap().expect("rank 0 ran");

    // The single-device f32 reference from the same seeds.
    let (w1, w2, b2) = (
        seeded_matrix(10, d_in, d_hidden),
        seeded_matrix(20, d_hidden, d_out),
        seeded_matrix(21, 1, d_out),
    );
    let mm = |a: &[f32], w: &[f32], k: usize, n: usize| -> Vec<f32> {
        (0..batch * n)
            .map(|e| (0..k).map(|p| a[(e / n) * k + p] * w[p * n + e % n]).sum())
            .collect()
    };
    let want: Vec<f32> = mm(&mm(&x, &w1, d_in, d_hidden), &w2, d_hidden, d_out)
        .iter()
        .enumerate()
        .map(|(e, v)| v + b2[e % d_out])
        .collect();
    let err = y
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0f32, f32::max);
    println!("y[0, 0..4] = {:?} (reference {:?})", &y[..4], &want[..4]);
    println!("max |y - reference| = {err:.3e}");
    println!(
        "rank 0, ticks: total {} = compute {} + exposed communication {} + launch and wait {} (communication {}, hidden {}; all-reduce {ran})",
        b.total,
        b.compute,
        b.communication - b.hidden,
        b.launch,
        b.communication,
        b.hidden
    );
    Ok(())
}
