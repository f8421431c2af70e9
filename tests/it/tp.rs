//! Tensor parallelism: the MLP against its f32 reference, DP × TP, the time
//! breakdown, the embedding, the region primitives and bad inputs.

use kernbench::ccl::{CclConfig, ReduceOp};
use kernbench::dist::{DistError, Tensor, init_process_group};
use kernbench::gemm::Placement;
use kernbench::spec::System;
use kernbench::tp::mlp::{MlpShape, run_mlp, run_mlp_placed};
use kernbench::tp::{
    self, BiasPolicy, ColumnParallelLinear, Timeline, VocabParallelEmbedding, seeded_matrix,
};
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

/// The default system (16 cubes of 8 PEs per SIP) with `n` SIPs in a ring.
fn sips(n: u32) -> System {
    System::embedded_default().with_sips(n).unwrap()
}

fn ccl() -> CclConfig {
    CclConfig::embedded_default()
}

/// The ring with its queues in HBM: every PE's TCM is free for GEMM tiles
/// however many communicators are installed.
fn hbm_ring() -> CclConfig {
    let yaml = "defaults:\n  algorithm: ring\n  buffer_kind: hbm\n  n_slots: 4\n  slot_size: 65536\n  chunks: auto\nalgorithms:\n  ring:\n    algorithm: ring\n";
    CclConfig::from_yaml(yaml, "hbm_ring").unwrap()
}

/// The seed's MLP (B = 1, 512 → 2048 → 512, with biases) for TP = 2, 4, 8:
/// every rank's output is within the first-order f16 bound of the f32
/// reference everywhere, and the largest error is small (measured: 0.0048,
/// 0.0043, 0.0059 against outputs up to 1.60). The breakdown sums to the
/// total, and the one collective is the whole communication.
#[test]
fn tp_mlp_matches_the_f32_reference() {
    for (tp, err) in [(2, 0.0048052073), (4, 0.004253447), (8, 0.0059375763)] {
        let r = run_mlp(
            &sips(tp),
            &ccl(),
            "ring",
            tp,
            MlpShape::default(),
            Some(BiasPolicy::Rank0),
        )
        .unwrap();
        assert!(r.within_bound, "tp {tp}: {r:?}");
        assert_eq!(r.max_abs_err, err, "tp {tp}");
        assert!(r.max_abs_ref > 1.0);
        let b = r.breakdown;
        assert_eq!(b.compute + b.communication - b.hidden + b.launch, b.total);
        assert_eq!(b.communication, r.allreduce_ticks);
        assert!(b.compute > 0 && b.launch > 0, "{b:?}");
        // Every rank leaves the layer with the same output.
        assert!(
            r.outputs.iter().all(|o| *o == r.outputs[0]),
            "tp {tp}: ranks differ"
        );
    }
}

/// Both bias policies stay within the bound; without bias too.
#[test]
fn bias_policies_and_no_bias_match_the_reference() {
    for bias in [Some(BiasPolicy::Replicate), None] {
        let r = run_mlp(&sips(2), &ccl(), "ring", 2, MlpShape::default(), bias).unwrap();
        assert!(r.within_bound && r.max_abs_err < 0.008, "{bias:?}: {r:?}");
    }
}

/// TP 2 inside DP 2 × TP 2 on 4 SIPs gives each replica exactly the output
/// of pure TP 2 on 2 SIPs. (With queues in TCM the extra communicators of
/// DP × TP leave the GEMM smaller tiles, so its sums round in another order:
/// the same result within f16 rounding, not bit for bit.)
#[test]
fn tp_inside_dp_gives_the_pure_tp_result() {
    let shape = MlpShape {
        batch: 4,
        ..MlpShape::default()
    };
    let pure = run_mlp(
        &sips(2),
        &hbm_ring(),
        "ring",
        2,
        shape,
        Some(BiasPolicy::Rank0),
    )
    .unwrap();
    let grid = run_mlp(
        &sips(4),
        &hbm_ring(),
        "ring",
        2,
        shape,
        Some(BiasPolicy::Rank0),
    )
    .unwrap();
    assert_eq!(grid.world, 4);
    assert!(pure.within_bound && grid.within_bound);
    for (r, out) in grid.outputs.iter().enumerate() {
        assert!(*out == pure.outputs[r % 2], "rank {r} differs from pure TP");
    }
}

/// The MLP's kernels placed off pe0 (where the cube leaders' all-reduce
/// runs) give the same outputs (and, as its GEMMs are too small to want
/// more than a few PEs a cube, the same compute time); its hidden communication is measured from
/// when each kernel and the all-reduce ran, and stays 0: the all-reduce
/// needs fc2's GEMM done, and nothing else runs meanwhile.
#[test]
fn the_mlp_placed_off_the_leaders_gives_the_same_outputs() {
    let shape = MlpShape::default();
    let owners = run_mlp(&sips(2), &ccl(), "ring", 2, shape, None).unwrap();
    let off = run_mlp_placed(
        &sips(2),
        &ccl(),
        "ring",
        (2, shape, None),
        &Placement::off_leader(8),
    )
    .unwrap();
    assert!(off.within_bound);
    assert_eq!(off.outputs, owners.outputs);
    assert_eq!(off.breakdown.hidden, 0);
    assert_eq!(off.breakdown.compute, owners.breakdown.compute);
    let e = run_mlp_placed(
        &sips(2),
        &ccl(),
        "ring",
        (2, shape, None),
        &Placement::Pes(vec![8]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("placement on PEs [8]: a cube has no PE 8; allowed: distinct PEs of 0..8"),
        "{e}"
    );
}

/// The MLP's communication is the all-reduce's own time: the same
/// all-reduce run alone on a fresh machine takes as long, to the tick.
#[test]
fn communication_equals_the_collective_run_alone() {
    let r = run_mlp(&sips(2), &ccl(), "ring", 2, MlpShape::default(), None).unwrap();
    let sys = sips(2);
    let mut pg = init_process_group(&sys, &ccl(), "ring", DataMode::Functional).unwrap();
    let alone = Mutex::new(0);
    pg.spawn(2, |ctx| {
        let z = ctx.empty((1, 512), tp::replicated(16))?;
        ctx.write(&z, &[0.5; 512])?;
        let res = ctx.all_reduce(&z.as_replicas(), ReduceOp::Sum)?;
        *alone.lock().unwrap() = res.ticks;
        Ok(())
    })
    .unwrap();
    let alone = alone.into_inner().unwrap();
    assert!(
        r.breakdown.communication == alone,
        "{} vs {alone}",
        r.breakdown.communication
    );
}

/// The vocabulary split over 2 ranks and 16 cubes each: every token gets
/// exactly its row of the table (one row plus zeros, summed).
#[test]
fn vocab_parallel_embedding_equals_a_plain_lookup() {
    let (vocab, dim) = (96, 40);
    let ids = [0u32, 95, 47, 48, 1, 31, 32, 64, 63, 5];
    let table = seeded_matrix(7, vocab, dim);
    let sys = sips(2);
    let mut pg = init_process_group(&sys, &ccl(), "ring", DataMode::Functional).unwrap();
    let mp = tp::initialize_model_parallel(&mut pg, 2).unwrap();
    let got = Mutex::new(Vec::new());
    pg.spawn(2, |ctx| {
        let emb = VocabParallelEmbedding::new(ctx, &mp, (vocab, dim), Some(7))?;
        let mut time = Timeline::start(ctx);
        let out = emb.forward(ctx, &mp, &ids, &mut time)?;
        got.lock().unwrap().push(ctx.read(&out)?);
        Ok(())
    })
    .unwrap();
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| table[i as usize * dim..(i as usize + 1) * dim].to_vec())
        .collect();
    for out in got.into_inner().unwrap() {
        assert!(out == want, "lookup differs");
    }
}

/// Cube `c`'s copy of a tensor replicated over cubes.
fn copy_on(t: &Tensor, c: usize) -> Tensor {
    Tensor {
        shards: vec![t.shards[c]],
        ..t.clone()
    }
}

/// scatter_to leaves participant p (rank r's cube c, p = 16r + c) block p of
/// x, exactly; after the other blocks are overwritten, gather_from brings
/// back x on every copy of every rank.
#[test]
fn gather_from_scatter_to_is_the_identity() {
    let (rows, cols) = (32, 24); // one row per participant of 2 × 16
    let x: Vec<f32> = (0..rows * cols).map(|i| (i % 997) as f32 - 400.0).collect();
    let sys = sips(2);
    let mut pg = init_process_group(&sys, &ccl(), "ring", DataMode::Functional).unwrap();
    let mp = tp::initialize_model_parallel(&mut pg, 2).unwrap();
    pg.spawn(2, |ctx| {
        let t = ctx.empty((rows, cols), tp::replicated(16))?;
        ctx.write(&t, &x)?;
        let mut time = Timeline::start(ctx);
        tp::scatter_to(ctx, &mp, &t, ReduceOp::Max, &mut time)?;
        for c in 0..16 {
            let p = 16 * ctx.rank() as usize + c;
            let mine = ctx.read(&copy_on(&t, c))?;
            let want = &x[p * cols..(p + 1) * cols];
            if &mine[p * cols..(p + 1) * cols] != want {
                return Err(DistError::Run(format!("participant {p}: wrong block")));
            }
            // Everything else is scratch now: overwrite it.
            let mut junk = vec![-7.0; rows * cols];
            junk[p * cols..(p + 1) * cols].copy_from_slice(want);
            ctx.write(&copy_on(&t, c), &junk)?;
        }
        tp::gather_from(ctx, &mp, &t, &mut time)?;
        for c in 0..16 {
            if ctx.read(&copy_on(&t, c))? != x {
                return Err(DistError::Run(format!("cube {c}: not x after gather")));
            }
        }
        assert_eq!(time.collective_ticks().len(), 2);
        Ok(())
    })
    .unwrap();
}

/// Bad TP sizes and layer sizes name the field and the fix.
#[test]
fn bad_tp_inputs_name_the_field() {
    let sys = sips(4);
    let mut pg = init_process_group(&sys, &ccl(), "ring", DataMode::TimingOnly).unwrap();
    let e = tp::initialize_model_parallel(&mut pg, 3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "tensor_model_parallel_size 3 does not divide the world of 4 ranks; allowed: 1, 2, 4"
        ),
        "{e}"
    );
    let mp = tp::initialize_model_parallel(&mut pg, 4).unwrap();
    let e = pg
        .spawn(4, |ctx| {
            ColumnParallelLinear::new(ctx, &mp, (64, 96), false, None)?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("out_features = 96 over 4 TP ranks") && e.contains("a multiple of 64"),
        "{e}"
    );
    let e = run_mlp(&sips(2), &ccl(), "ring", 2, MlpShape::default(), None);
    assert!(e.is_ok());
    let e = pg
        .spawn(4, |ctx| {
            let fc = ColumnParallelLinear::new(ctx, &mp, (64, 128), false, None)?;
            let x = ctx.empty((2, 64), tp::cube_cols(16))?;
            fc.forward(ctx, &x, &mut Timeline::start(ctx))?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the input must be replicated") && e.contains("tp::replicated"),
        "{e}"
    );
}

/// A transformer block: the breakdown sums to the total, the two
/// all-reduces are the whole communication, and each takes what the same
/// all-reduce takes run alone.
#[test]
fn block_breakdown_sums_and_its_all_reduces_match_a_lone_run() {
    use kernbench::tp::block::{BlockShape, run_block};
    let sys = sips(2);
    let shape = BlockShape {
        tokens: 64,
        hidden: 1024,
    };
    let r = run_block(&sys, &ccl(), "ring", 2, shape, None).unwrap();
    let b = r.breakdown;
    assert_eq!(b.compute + b.communication - b.hidden + b.launch, b.total);
    assert_eq!(r.allreduce_ticks.len(), 2);
    assert_eq!(b.communication, r.allreduce_ticks.iter().sum::<u64>());
    let mut pg = init_process_group(&sys, &ccl(), "ring", DataMode::TimingOnly).unwrap();
    let alone = Mutex::new(0);
    pg.spawn(2, |ctx| {
        let z = ctx.empty((64, 1024), tp::replicated(16))?;
        *alone.lock().unwrap() = ctx.all_reduce(&z.as_replicas(), ReduceOp::Sum)?.ticks;
        Ok(())
    })
    .unwrap();
    let alone = alone.into_inner().unwrap();
    assert!(
        r.allreduce_ticks.iter().all(|&t| t == alone),
        "{:?} vs {alone}",
        r.allreduce_ticks
    );
}

/// The built-in plan parses and covers TP 1-16 x 3 topologies x 4 widths;
/// a small plan runs, TP = 1 has efficiency 1, and bad plans name the field.
#[test]
fn tp_plans_run_and_bad_ones_name_the_field() {
    use kernbench::tp::study::TpPlan;
    let plan = TpPlan::find("tp").unwrap().unwrap();
    assert_eq!(plan.points().len(), 60);
    let dir = std::env::temp_dir().join(format!("kb-tp-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_string_lossy().to_string()
    };
    let small = "name: small\nworkload: tp_block\nalgorithm: ring\ntokens: 32\ngrid:\n  topology: [ring_1d]\n  hidden: [512]\n  tp: [1, 2]\n";
    let plan = TpPlan::find(&write("small.yaml", small)).unwrap().unwrap();
    let out = tempfile::tempdir().unwrap();
    let rows: Vec<_> = run_tp(&plan, out.path(), false)
        .rows
        .into_iter()
        .map(|r| r.row.unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].efficiency, Some(1.0));
    for r in &rows {
        let parts = r.compute_us + r.exposed_comm_us + r.launch_wait_us;
        assert!((parts - r.time_us).abs() < 1e-6, "{r:?}");
    }
    let e = TpPlan::find(&write("bad.yaml", &small.replace("tp: [1, 2]", "tp: [0]")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("grid.tp") && e.contains("at least 1"), "{e}");
    let e = TpPlan::find(&write(
        "bad2.yaml",
        &small.replace("algorithm: ring", "algorithm: nope"),
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("algorithm") && e.contains("nope"), "{e}");
    let e = TpPlan::find(&write(
        "bad3.yaml",
        &small.replace("hidden: [512]", "hidden: [512]\n  sips: [4]"),
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("sips"), "{e}");
    // Not a TP plan: left to the collective sweep.
    assert!(TpPlan::find("default").unwrap().is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A TP plan that names no `algorithm` runs its all-reduces under `auto`:
/// the row says `auto` and names, for each of the block's two all-reduces,
/// the tuner's pick for its size over the TP group; a plan naming `ring`
/// says `ring+ring`.
#[test]
fn a_tp_plan_without_an_algorithm_runs_the_autotuners_picks() {
    use kernbench::autotune::Tuner;
    use kernbench::ccl::{Collective, Group};
    use kernbench::tp::study::TpPlan;
    let d = tempfile::tempdir().unwrap();
    let body = "name: small\nworkload: tp_block\ntokens: 32\ngrid:\n  topology: [ring_1d]\n  hidden: [512]\n  tp: [2]\n";
    let (auto, ring) = (d.path().join("auto.yaml"), d.path().join("ring.yaml"));
    std::fs::write(&auto, body).unwrap();
    std::fs::write(&ring, body.replace("tokens", "algorithm: ring\ntokens")).unwrap();
    let row = |path: &std::path::PathBuf, out: &str| {
        let plan = TpPlan::find(path.to_str().unwrap()).unwrap().unwrap();
        let outcome = run_tp(&plan, &d.path().join(out), false);
        outcome.rows.into_iter().next().unwrap().row.unwrap()
    };
    let (tuned, fixed) = (row(&auto, "a"), row(&ring, "r"));
    assert_eq!(
        (fixed.algorithm.as_str(), fixed.all_reduces.as_str()),
        ("ring", "ring+ring")
    );
    let sys = sips(2);
    let pick = Tuner::new(&sys, &ccl())
        .decide_in(&Group::new(&sys), Collective::AllReduce, 32 * 512 * 2)
        .unwrap()
        .config;
    assert_eq!(tuned.algorithm, "auto");
    assert_eq!(tuned.all_reduces, format!("{pick}+{pick}"));
    assert_ne!(pick, "ring");
    assert!(tuned.comm_us < fixed.comm_us, "{tuned:?}\n{fixed:?}");
}

/// Runs a TP plan on the default system through the sweep runner into
/// `out` on 2 jobs.
fn run_tp(
    plan: &kernbench::tp::study::TpPlan,
    out: &std::path::Path,
    resume: bool,
) -> kernbench::sweep::Outcome<kernbench::tp::study::TpRecord> {
    use kernbench::sweep::Options;
    let base = System::embedded_default();
    let cost = kernbench::command_costs::tp_study(plan, &base).unwrap();
    let seconds = cost.parts.iter().map(|(_, e)| e.seconds).collect();
    let study = kernbench::tp::study::TpStudy::new(plan, &base, seconds).unwrap();
    let opts = Options {
        resume,
        ..Options::new(out.to_path_buf(), 2)
    };
    kernbench::sweep::run(&study, &opts).unwrap()
}

/// A TP plan whose TP = 1 point is lost after a run (a partial result set)
/// and is resumed with `sweep --resume` runs only that point and ends with
/// the uninterrupted results.csv, speedups included; without --resume the
/// used directory is refused.
#[test]
fn a_tp_plan_resumed_after_a_partial_run_gives_the_same_results() {
    use kernbench::tp::study::TpPlan;
    let d = tempfile::tempdir().unwrap();
    let plan_path = d.path().join("small.yaml");
    std::fs::write(
        &plan_path,
        "name: small\nworkload: tp_block\nalgorithm: ring\ntokens: 32\ngrid:\n  topology: [ring_1d]\n  hidden: [512]\n  tp: [1, 2]\n",
    )
    .unwrap();
    let plan = TpPlan::find(plan_path.to_str().unwrap()).unwrap().unwrap();
    let (full, part) = (d.path().join("full"), d.path().join("part"));
    run_tp(&plan, &full, false);
    run_tp(&plan, &part, false);
    let tp1 = part.join("points/000000-ring_1d-h512-tp1.json");
    std::fs::remove_file(&tp1).unwrap();
    let partial = std::fs::read_to_string(part.join("results.csv")).unwrap();
    assert_eq!(partial.lines().count(), 3, "{partial}");
    let run = |resume: bool| {
        let mut args = vec!["sweep", "--plan", plan_path.to_str().unwrap()];
        args.extend(["--out", part.to_str().unwrap(), "--jobs", "1"]);
        if resume {
            args.push("--resume");
        }
        std::process::Command::new(env!("CARGO_BIN_EXE_kernbench"))
            .args(&args)
            .output()
            .unwrap()
    };
    let refused = run(false);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("already holds results: pass --resume"),
        "{err}"
    );
    let resumed = run(true);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    assert!(
        err.contains("2 of 2 points done (1 run now in") && err.contains(", 1 from before)"),
        "{err}"
    );
    assert!(tp1.exists());
    let read = |dir: &std::path::Path| std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert_eq!(read(&part), read(&full));
    assert!(
        read(&full).contains("ring_1d,2,512,32,ring,"),
        "{}",
        read(&full)
    );
}

/// A shape whose matrices no address can count is refused by name before
/// anything is allocated (not an overflow or an allocator abort).
#[test]
fn an_mlp_shape_beyond_addresses_is_refused_by_name() {
    let huge = MlpShape {
        batch: 1 << 40,
        d_in: 1 << 40,
        ..MlpShape::default()
    };
    let e = run_mlp(&sips(1), &ccl(), "ring", 1, huge, None).unwrap_err();
    assert!(
        matches!(e, DistError::Config(_))
            && e.to_string()
                .starts_with("batch x d_in = 1099511627776 x 1099511627776: not a matrix"),
        "{e}"
    );
    let empty = MlpShape {
        d_out: 0,
        ..MlpShape::default()
    };
    let e = run_mlp(&sips(1), &ccl(), "ring", 1, empty, None).unwrap_err();
    assert!(e.to_string().starts_with("batch x d_out = 1 x 0"), "{e}");
}
