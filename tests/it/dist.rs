//! The host runtime, torch.distributed in Rust form: ranks, spawn, tensors,
//! collectives through the process group, overlap, failures, determinism.

use crate::common;
use common::system;
use half::f16;
use kernbench::ccl::verify::value;
use kernbench::ccl::{CclConfig, Collective, Job, ReduceOp};
use kernbench::dist::{
    DPPolicy, DistError, ProcessGroup, TurnOrder, WORLD, WorkClass, init_process_group,
};
use kernbench::kernel::{Addr, Tl};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

/// `sips` SIPs on a ring, each a `w`x`h` cube mesh.
fn sips(n: u32, w: u32, h: u32) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.sip.cube_mesh.w = w;
        s.sip.cube_mesh.h = h;
    })
}

fn pg(sys: &System, entry: &str, mode: DataMode) -> ProcessGroup {
    init_process_group(sys, &CclConfig::embedded_default(), entry, mode).unwrap()
}

/// Runs `f` on another thread and fails the test if it takes longer than a minute (a hang).
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the distributed program hung")
}

/// An `algorithm: auto` entry needs what picks each collective's
/// configuration: dist alone refuses it and names the builder that passes
/// the autotuner in.
#[test]
fn an_auto_entry_is_built_by_the_autotuners_init() {
    let sys = sips(2, 1, 1);
    let ccl = CclConfig::embedded_default();
    let Err(DistError::Config(e)) = init_process_group(&sys, &ccl, "auto", DataMode::TimingOnly)
    else {
        panic!("dist has no tuner of its own for an auto entry");
    };
    assert_eq!(
        e,
        "ccl entry 'auto' has algorithm auto, which needs the autotuner to pick each collective's configuration; build the group with the autotune module's init_process_group, or name an entry with a fixed algorithm"
    );
    let pg =
        kernbench::autotune::init_process_group(&sys, &ccl, "auto", DataMode::TimingOnly).unwrap();
    assert!(pg.tuner.is_some() && pg.group(WORLD).comms.is_empty());
}

#[test]
fn world_size_is_the_sip_count_unless_ccl_overrides_it() {
    let sys = sips(4, 1, 1);
    assert_eq!(pg(&sys, "ring", DataMode::TimingOnly).world_size, 4);
    let yaml = "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 1, world_size: 3 }
algorithms:
  ring: { algorithm: ring }
  ring2: { algorithm: ring, world_size: 2 }
";
    let ccl = CclConfig::from_yaml(yaml, "test").unwrap();
    let size = |e: &str| {
        init_process_group(&sys, &ccl, e, DataMode::TimingOnly)
            .unwrap()
            .world_size
    };
    // Entry override > defaults override > SIP count.
    assert_eq!((size("ring2"), size("ring")), (2, 3));
    let too_many = "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 1, world_size: 9 }";
    let ccl = CclConfig::from_yaml(too_many, "test").unwrap();
    let Err(e) = init_process_group(&sys, &ccl, "defaults", DataMode::TimingOnly) else {
        panic!("9 ranks on 4 SIPs of 8 PEs");
    };
    assert!(
        e.to_string()
            .starts_with("world_size 9 (ccl entry 'defaults') fits neither"),
        "{e}"
    );
    let bad = "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 1, mapper: nearest }";
    let e = CclConfig::from_yaml(bad, "test").unwrap_err().to_string();
    assert!(
        e.contains("defaults.mapper") && e.contains("leader_only, all_pes"),
        "{e}"
    );
}

#[test]
fn spawn_runs_one_worker_per_rank_each_with_its_own_rank_and_device() {
    let sys = sips(4, 2, 1);
    let mut pg = pg(&sys, "ring", DataMode::Functional);
    let seen = Mutex::new(Vec::new());
    pg.spawn(4, |ctx| {
        let t = ctx.empty((2, 8), DPPolicy::cube_rows(2))?;
        // Tensors land on the rank's own SIP, one shard per cube leader.
        let sips: Vec<u32> = t.shards.iter().map(|s| s.sip).collect();
        seen.lock()
            .unwrap()
            .push((ctx.rank(), ctx.world_size(), ctx.current_device(), sips));
        if ctx.rank() == 3 {
            ctx.set_device(1)?;
            let u = ctx.empty((1, 8), DPPolicy::cube_rows(1))?;
            assert_eq!(u.shards[0].sip, 1);
        }
        Ok(())
    })
    .unwrap();
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(
        seen,
        (0..4).map(|r| (r, 4, r, vec![r, r])).collect::<Vec<_>>()
    );
    let e = pg.spawn(3, |_| Ok(())).unwrap_err().to_string();
    assert!(
        e.starts_with("spawn of 3 workers on a world of 4 ranks"),
        "{e}"
    );
}

/// The same all-reduce through the process group and through `kernbench
/// run`'s path (a communicator run on a fresh machine): the same values and
/// the same ticks; the process group's start is after its install.
#[test]
fn process_group_all_reduce_matches_the_run_path_tick_for_tick() {
    for n in [2u32, 4, 16] {
        let sys = sips(n, 4, 4);
        let elems = 512usize;
        let config = CclConfig::embedded_default();
        let (mut m, comm) =
            common::communicator(&sys, config.entry("ring").unwrap(), DataMode::Functional)
                .unwrap();
        let direct = comm
            .run(
                &mut m,
                Job {
                    collective: Collective::AllReduce,
                    op: ReduceOp::Sum,
                    elems,
                },
            )
            .unwrap();
        assert_eq!(direct.verified, Some(true));
        let mut pg = pg(&sys, "ring", DataMode::Functional);
        assert!(pg.init_tick > 0, "install takes simulated time");
        let results = Mutex::new(Vec::new());
        pg.spawn(n, |ctx| {
            let cubes = 16usize;
            let t = ctx.empty((cubes, elems), DPPolicy::cube_replicas(16))?;
            // Row c of rank r: (r·16 + c + i) mod 7.
            let r = ctx.rank() as usize;
            let data: Vec<f32> = (0..cubes * elems)
                .map(|k| ((r * 16 + k / elems + k % elems) % 7) as f32)
                .collect();
            ctx.write(&t, &data)?;
            let start = ctx.now();
            let res = ctx.all_reduce(&t, ReduceOp::Sum)?;
            let got = ctx.read(&t)?;
            let want: Vec<f32> = (0..elems)
                .map(|i| {
                    (0..n as usize * 16)
                        .map(|p| ((p + i) % 7) as f32)
                        .sum::<f32>()
                })
                .collect();
            for c in 0..cubes {
                assert_eq!(
                    &got[c * elems..(c + 1) * elems],
                    &want[..],
                    "rank {r} cube {c}"
                );
            }
            results.lock().unwrap().push((res.ticks, start));
            Ok(())
        })
        .unwrap();
        let results = results.into_inner().unwrap();
        assert_eq!(results.len(), n as usize);
        for (ticks, start) in results {
            assert_eq!(ticks, direct.ticks, "{n} SIPs");
            assert!(start >= pg.init_tick);
        }
    }
}

#[test]
fn subgroups_keep_their_queues_apart_dp_by_tp() {
    // 8 SIPs as 2 DP x 4 TP: TP groups [0..4) and [4..8), DP pairs {r, r+4}.
    let sys = sips(8, 1, 1);
    let mut pg = pg(&sys, "ring", DataMode::Functional);
    let tp = [
        pg.new_group(&[0, 1, 2, 3]).unwrap(),
        pg.new_group(&[4, 5, 6, 7]).unwrap(),
    ];
    let dp: Vec<_> = (0..4).map(|r| pg.new_group(&[r, r + 4]).unwrap()).collect();
    pg.spawn(8, |ctx| {
        let r = ctx.rank();
        let t = ctx.empty((1, 64), DPPolicy::cube_rows(1))?;
        ctx.write(&t, &vec![r as f32; 64])?;
        ctx.collective(
            tp[(r / 4) as usize],
            Collective::AllReduce,
            &t,
            ReduceOp::Sum,
        )?;
        let block = (r / 4) * 4;
        let tp_sum = (block..block + 4).sum::<u32>() as f32;
        assert!(ctx.read(&t)?.iter().all(|&v| v == tp_sum), "rank {r} TP");
        ctx.collective(
            dp[(r % 4) as usize],
            Collective::AllReduce,
            &t,
            ReduceOp::Max,
        )?;
        // The max over the DP pair of the TP sums: the second block's.
        assert!(ctx.read(&t)?.iter().all(|&v| v == 22.0), "rank {r} DP");
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        assert!(
            ctx.read(&t)?.iter().all(|&v| v == 8.0 * 22.0),
            "rank {r} world"
        );
        Ok(())
    })
    .unwrap();
}

#[test]
fn repeated_collectives_stay_in_their_epochs_and_a_barrier_aligns_clocks() {
    let sys = sips(4, 1, 1);
    let mut pg = pg(&sys, "ring", DataMode::Functional);
    let ends = Mutex::new(Vec::new());
    pg.spawn(4, |ctx| {
        let r = ctx.rank() as f32;
        let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
        for round in 0..5 {
            ctx.write(&t, &[r + round as f32; 32])?;
            ctx.all_reduce(&t, ReduceOp::Sum)?;
            assert!(ctx.read(&t)?.iter().all(|&v| v == 6.0 + 4.0 * round as f32));
        }
        let at = ctx.barrier(WORLD)?;
        ends.lock().unwrap().push((at, ctx.now()));
        Ok(())
    })
    .unwrap();
    let ends = ends.into_inner().unwrap();
    assert!(ends.iter().all(|e| *e == ends[0]), "{ends:?}");
}

#[test]
fn mismatched_calls_name_the_ranks_and_never_hang() {
    let e = within_a_minute(|| {
        let sys = sips(4, 1, 1);
        let mut pg = pg(&sys, "ring", DataMode::TimingOnly);
        pg.spawn(4, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            if ctx.rank() == 2 {
                ctx.all_gather(&t)?;
            } else {
                ctx.all_reduce(&t, ReduceOp::Sum)?;
            }
            Ok(())
        })
        .unwrap_err()
    });
    let s = e.to_string();
    assert!(
        s.contains("mismatched collectives in group 'world': as its collective #0, rank(s)")
            && s.contains("called all_reduce(64 B, sum")
            && s.contains("called all_gather(64 B"),
        "{s}"
    );
    // A rank that stops early while the others wait is named.
    let e = within_a_minute(|| {
        let sys = sips(4, 1, 1);
        let mut pg = pg(&sys, "ring", DataMode::TimingOnly);
        pg.spawn(4, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            ctx.all_reduce(&t, ReduceOp::Sum)?;
            if ctx.rank() != 1 {
                ctx.all_reduce(&t, ReduceOp::Sum)?;
            }
            Ok(())
        })
        .unwrap_err()
    });
    let s = e.to_string();
    assert!(
        s.contains("rank(s) 0, 2, 3 joined all_reduce(64 B, sum, buffer at offset 0) (collective #1 of group 'world'), but rank 1 has finished"),
        "{s}"
    );
}

#[test]
fn a_failing_rank_fails_spawn_by_name_and_the_group_stays_usable() {
    let sys = sips(4, 1, 1);
    let mut pg = pg(&sys, "ring", DataMode::Functional);
    let e = pg
        .spawn(4, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            if ctx.rank() == 3 {
                return Err(DistError::Config("bad gradient".into()));
            }
            ctx.all_reduce(&t, ReduceOp::Sum)?;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.to_string(), "rank 3: bad gradient");
    let e = pg
        .spawn(4, |ctx| {
            if ctx.rank() == 1 {
                panic!("worker bug");
            }
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.to_string(), "rank 1: panicked: worker bug");
    // The half-joined collective of the first spawn is gone: a new one completes.
    pg.spawn(4, |ctx| {
        let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
        ctx.write(&t, &[1.0; 32])?;
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        assert!(ctx.read(&t)?.iter().all(|&v| v == 4.0));
        Ok(())
    })
    .unwrap();
}

/// A compute kernel: `rounds` elementwise adds over `n` elements in TCM.
fn busy(tl: &mut Tl, &(n, rounds): &(usize, usize)) {
    let x = tl.load(Addr::tcm(0), n);
    let acc = tl.repeat(rounds, &[x], |tl, _, acc| vec![tl.add(acc[0], acc[0])]);
    tl.store(Addr::tcm(0), acc[0]);
}

/// Each rank's compute on PE 1 of its cube, a collective on the cube
/// leaders: (compute ticks, collective ticks, both together) per program.
fn overlap_run(compute: bool, collective: bool) -> u64 {
    let sys = sips(2, 1, 1);
    let mut pg = pg(&sys, "ring", DataMode::TimingOnly);
    let end = Mutex::new(0);
    pg.spawn(2, |ctx| {
        let t = ctx.empty((1, 1 << 20), DPPolicy::cube_rows(1))?;
        let start = ctx.now();
        let work = if compute {
            Some(ctx.launch(busy, &(1 << 14, 400), &[(0, 1)])?)
        } else {
            None
        };
        if collective {
            ctx.all_reduce(&t, ReduceOp::Sum)?;
        }
        let mut finish = ctx.now();
        if let Some(w) = work {
            finish = finish.max(ctx.wait(&w)?.end);
        }
        let mut e = end.lock().unwrap();
        *e = (*e).max(finish - start);
        Ok(())
    })
    .unwrap();
    end.into_inner().unwrap()
}

#[test]
fn compute_and_communication_overlap_on_one_clock() {
    let (compute, comm, both) = (
        overlap_run(true, false),
        overlap_run(false, true),
        overlap_run(true, true),
    );
    println!("compute {compute} ticks, all-reduce {comm} ticks, both {both} ticks");
    assert!(compute > 0 && comm > 0);
    assert!(
        both < compute + comm,
        "no overlap: {both} >= {compute} + {comm}"
    );
    assert!(
        both >= compute.max(comm),
        "{both} beats the longer of the two"
    );
}

#[test]
fn tensors_that_do_not_fit_name_the_memory_and_what_is_free() {
    let sys = sips(2, 1, 1);
    let hbm = sys.spec.memory.hbm.size_bytes;
    let mut pg = pg(&sys, "ring", DataMode::TimingOnly);
    let e = pg
        .spawn(2, |ctx| {
            let rows = (hbm / 2 / 1024) as usize;
            ctx.empty((rows, 1024), DPPolicy::cube_rows(1))?;
            ctx.empty((1, 1024), DPPolicy::cube_rows(1))?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("rank 0: hbm of sip0.cube0 cannot hold a shard of 2048 B of a 1x1024 tensor of rank 0: 2048 B requested, 0 B free"),
        "{e}"
    );
    assert!(e.contains("free earlier allocations"), "{e}");
}

/// Same program, different worker turn orders: bit-identical clocks and data.
#[test]
fn results_do_not_depend_on_the_order_workers_take_turns() {
    let run = |order: TurnOrder| {
        let sys = sips(4, 2, 1);
        let mut pg = pg(&sys, "ring", DataMode::Functional);
        pg.turn_order = order;
        let out = Mutex::new(Vec::new());
        pg.spawn(4, |ctx| {
            let r = ctx.rank() as usize;
            let t = ctx.empty((2, 256), DPPolicy::cube_replicas(2))?;
            ctx.write(
                &t,
                &(0..512)
                    .map(|i| ((i * 3 + r) % 5) as f32)
                    .collect::<Vec<_>>(),
            )?;
            // The compute kernel's input: PE 1's TCM from offset 0.
            let scratch = ctx.empty_in(Space::Tcm, (2, 1 << 10), DPPolicy::pe_rows(1, 2))?;
            assert_eq!(scratch.shards[1].addr, 0);
            ctx.write(&scratch, &vec![1.0; 2 << 10])?;
            let w = ctx.launch(busy, &(1 << 10, 20 + 10 * r), &[(0, 1)])?;
            let a = ctx.all_reduce(&t, ReduceOp::Sum)?;
            let k = ctx.wait(&w)?;
            out.lock()
                .unwrap()
                .push((r, a.ticks, k, ctx.now(), ctx.read(&t)?));
            Ok(())
        })
        .unwrap();
        let mut v = out.into_inner().unwrap();
        v.sort_by_key(|x| x.0);
        format!("{v:?}")
    };
    let a = run(TurnOrder::Ascending);
    assert_eq!(a, run(TurnOrder::Ascending));
    assert_eq!(a, run(TurnOrder::Descending));
}

/// The all_pes layout (every PE of every cube holds a shard; the gap
/// the leader-only layout leaves): ring and tree reduce over every PE, element by element.
#[test]
fn every_pe_layout_all_reduces_element_by_element() {
    let sys = sips(2, 2, 1);
    let (cubes, pes) = (2usize, sys.pes_per_cube() as usize);
    for algorithm in ["ring", "tree"] {
        let yaml = format!(
            "defaults: {{ algorithm: {algorithm}, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 2, mapper: all_pes }}"
        );
        let ccl = CclConfig::from_yaml(&yaml, "test").unwrap();
        let mut pg = init_process_group(&sys, &ccl, "defaults", DataMode::Functional).unwrap();
        let elems = 300;
        pg.spawn(2, |ctx| {
            let rows = cubes * pes;
            let t = ctx.empty(
                (rows, elems),
                DPPolicy::pe_rows(cubes as u32, pes as u32).as_replicas(),
            )?;
            let r = ctx.rank() as usize;
            // Row k (cube k / pes, pe k % pes) of rank r: (r·rows + k) · 3 + i, mod 11.
            let value = |r: usize, k: usize, i: usize| (((r * rows + k) * 3 + i) % 11) as f32;
            let data: Vec<f32> = (0..rows * elems)
                .map(|x| value(r, x / elems, x % elems))
                .collect();
            ctx.write(&t, &data)?;
            let res = ctx.all_reduce(&t, ReduceOp::Sum)?;
            assert_eq!(res.participants, 2 * rows);
            let got = ctx.read(&t)?;
            for (x, &v) in got.iter().enumerate() {
                let i = x % elems;
                let want: f32 = (0..2)
                    .flat_map(|q| (0..rows).map(move |k| value(q, k, i)))
                    .sum();
                assert_eq!(v, want, "{algorithm}: rank {r} element {x}");
            }
            Ok(())
        })
        .unwrap();
    }
    // Algorithms that run on cube leaders only refuse the layout at load.
    let yaml = "defaults: { algorithm: hier_lanes, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 1, mapper: all_pes }";
    let e = CclConfig::from_yaml(yaml, "test").unwrap_err();
    assert_eq!(e.path, "defaults.mapper");
    assert_eq!(
        e.problem,
        "entry 'defaults' runs algorithm 'hier_lanes' with mapper all_pes, but hier_lanes runs on cube leaders only"
    );
    assert!(
        e.allowed
            .contains("the mappers hier_lanes allows: leader_only; set mapper: leader_only"),
        "{e}"
    );
}

/// The install plans of the two mappers: which PEs the ring's
/// wiring reaches, and that each gets one queue pair per ring direction.
#[test]
fn install_plans_cover_the_leaders_or_every_pe() {
    use kernbench::ccl::{Group, algorithms};
    use kernbench::kernel::wiring::QueueConfig;
    let sys = sips(2, 2, 1);
    let q = QueueConfig {
        buffer: Space::Tcm,
        n_slots: 2,
        slot_size: 1024,
    };
    let ring = algorithms::find("ring").unwrap();
    let leaders = Group::new(&sys);
    let mut pes: Vec<u32> = ring.wiring(&leaders, &q).iter().map(|t| t.0.0).collect();
    pes.sort();
    // pe0 of each of the 4 cubes (8 PEs per cube).
    assert_eq!(pes, vec![0, 8, 16, 24]);
    let tables = ring.wiring(&leaders.every_pe(), &q);
    let mut pes: Vec<u32> = tables.iter().map(|t| t.0.0).collect();
    pes.sort();
    assert_eq!(pes, (0..32).collect::<Vec<_>>());
    assert!(tables.iter().all(|t| t.1.len() == 2));
    assert!(algorithms::find("nearest").is_err());
}

/// The legacy rank = flat PE mode: world_size = the PE count
/// gives one rank per PE, each with a one-shard tensor in its TCM.
#[test]
fn world_size_of_every_pe_gives_one_rank_per_pe() {
    let sys = system(|s| {
        s.system.sips.count = 2;
        s.sip.cube_mesh.w = 2;
        s.sip.cube_mesh.h = 1;
        s.cube.pe_layout.pe_per_corner = 1;
        s.cube.pe_layout.corners = 2;
    });
    let yaml = "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 1, world_size: 8 }";
    let ccl = CclConfig::from_yaml(yaml, "test").unwrap();
    let mut pg = init_process_group(&sys, &ccl, "defaults", DataMode::Functional).unwrap();
    assert_eq!((pg.world_size, pg.unit), (8, kernbench::dist::RankUnit::Pe));
    pg.spawn(8, |ctx| {
        let r = ctx.rank();
        let t = ctx.empty((1, 100), DPPolicy::cube_rows(1))?;
        let s = t.shards[0];
        // Rank r is PE r: (sip, cube, pe) = (r / 4, r / 2 % 2, r % 2).
        assert_eq!((s.sip, s.cube, s.pe), (r / 4, r / 2 % 2, r % 2));
        ctx.write(
            &t,
            &(0..100)
                .map(|i| ((r as usize + i) % 3) as f32)
                .collect::<Vec<_>>(),
        )?;
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        let want: Vec<f32> = (0..100)
            .map(|i| (0..8).map(|q| ((q + i) % 3) as f32).sum())
            .collect();
        assert_eq!(ctx.read(&t)?, want, "rank {r}");
        Ok(())
    })
    .unwrap();
    assert!(
        pg.new_group(&[0, 1])
            .unwrap_err()
            .to_string()
            .contains("rank = flat PE mode")
    );
    let bad = "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 1, world_size: 5 }";
    let ccl = CclConfig::from_yaml(bad, "test").unwrap();
    let Err(e) = init_process_group(&sys, &ccl, "defaults", DataMode::TimingOnly) else {
        panic!("5 ranks fit neither 2 SIPs nor 8 PEs");
    };
    assert!(
        e.to_string().contains("allowed: 1 to 2, or exactly 8"),
        "{e}"
    );
}

/// `all_to_all` through the process group: participant p = rank · cubes +
/// cube ends with block j = participant j's input block p, element by element.
#[test]
fn process_group_all_to_all_exchanges_blocks() {
    let sys = sips(2, 2, 1);
    let (cubes, n) = (2usize, 4usize);
    let (block, elems) = (5usize, 4 * 5usize);
    let mut pg = pg(&sys, "pairwise", DataMode::Functional);
    // Element i of participant p's input: (p · 7 + i) mod 13.
    let value = |p: usize, i: usize| ((p * 7 + i) % 13) as f32;
    pg.spawn(2, |ctx| {
        let t = ctx.empty((cubes, elems), DPPolicy::cube_replicas(cubes as u32))?;
        let r = ctx.rank() as usize;
        let data: Vec<f32> = (0..cubes * elems)
            .map(|x| value(r * cubes + x / elems, x % elems))
            .collect();
        ctx.write(&t, &data)?;
        let res = ctx.all_to_all(&t)?;
        assert_eq!(
            (res.collective, res.participants),
            (Collective::AllToAll, n)
        );
        let got = ctx.read(&t)?;
        for (x, &v) in got.iter().enumerate() {
            let (p, i) = (r * cubes + x / elems, x % elems);
            let (j, k) = (i / block, i % block);
            assert_eq!(v, value(j, p * block + k), "rank {r} element {x}");
        }
        Ok(())
    })
    .unwrap();
}

/// The process group passes the same budget as the CLI before it builds
/// anything: over it, a Config error with the estimate and the knobs.
#[test]
fn a_process_group_over_its_budget_is_refused_before_the_build() {
    use kernbench::estimate::Budget;
    let sys = System::embedded_default();
    let tight = Budget {
        bytes: 1 << 20,
        seconds: 3600.0,
    };
    let ccl = CclConfig::embedded_default();
    let refused = kernbench::dist::init_process_group_within(
        &sys,
        &ccl,
        "ring",
        DataMode::TimingOnly,
        &tight,
    );
    let Err(DistError::Config(e)) = refused else {
        panic!("a 1 MiB budget must refuse the default system's process group");
    };
    let want = kernbench::dist::process_group_estimate(&sys, 4);
    assert!(
        e.starts_with("process group on <embedded default>: this run is estimated to need ")
            && e.contains(&kernbench::estimate::gib(want.peak_bytes))
            && e.contains("world_size")
            && e.contains("more than the budget of 0.00 GiB"),
        "{e}"
    );
}

/// `n` SIPs of one cube each on `topology` (a `w`x`h` grid unless a ring).
fn grid_of(topology: SipTopology, w: u32, h: u32) -> System {
    system(|s| {
        s.system.sips.count = w * h;
        s.system.sips.topology = topology;
        if topology != SipTopology::Ring1d {
            (s.system.sips.w, s.system.sips.h) = (Some(w), Some(h));
        }
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (1, 1);
    })
}

/// Rank `r`'s input at element `i` (0 to 3, see `verify::value`).
fn input_of(r: u32, elems: usize) -> Vec<f32> {
    (0..elems).map(|i| value(r as usize, i)).collect()
}

/// A group is any distinct ranks in any order, as torch's `new_group`: the
/// list's order is the group's rank order, so `[3, 1]` broadcasts from rank
/// 3; a repeated or missing rank is refused, naming it and the fix.
#[test]
fn a_group_is_any_distinct_ranks_in_the_order_given() {
    let sys = sips(4, 1, 1);
    let mut pg = pg(&sys, "ring", DataMode::Functional);
    let skip = pg.new_group(&[0, 1, 3]).unwrap();
    let back = pg.new_group(&[3, 1]).unwrap();
    assert_eq!(pg.group(back).members.sips[..], [3, 1]);
    let e = pg.new_group(&[1, 1]).unwrap_err().to_string();
    assert!(
        e.contains("rank 1 appears twice in [1, 1]; allowed: each rank once")
            && e.contains("remove the repeated 1"),
        "{e}"
    );
    let e = pg.new_group(&[0, 4]).unwrap_err().to_string();
    assert!(
        e.contains("rank 4 is not in the world of 4 ranks; allowed: ranks 0..4, each once"),
        "{e}"
    );
    let elems = 48;
    pg.spawn(4, |ctx| {
        let r = ctx.rank();
        let t = ctx.empty((1, elems), DPPolicy::cube_rows(1))?;
        ctx.write(&t, &input_of(r, elems))?;
        if r != 2 {
            ctx.collective(skip, Collective::AllReduce, &t, ReduceOp::Sum)?;
            let want: Vec<f32> = (0..elems)
                .map(|i| [0, 1, 3].iter().map(|&q| value(q, i)).sum())
                .collect();
            assert_eq!(ctx.read(&t)?, want, "rank {r} in [0, 1, 3]");
        }
        ctx.write(&t, &input_of(r, elems))?;
        if r == 1 || r == 3 {
            ctx.collective(back, Collective::Broadcast, &t, ReduceOp::Sum)?;
        }
        // [3, 1] broadcasts rank 3's tensor; ranks 0 and 2 keep their own.
        let want = if r == 1 { 3 } else { r };
        assert_eq!(ctx.read(&t)?, input_of(want, elems), "rank {r}");
        Ok(())
    })
    .unwrap();
}

/// Broadcast and reduce from every root, element by element against the
/// inputs: every rank ends with the root's tensor; the root holds the f16
/// of the sum (inputs 0 to 3 keep every sum exact, as the library's own
/// reference does). A ring of 2, 5 or 16 ranks turns on the world's
/// queues; tree installs a communicator per root; hier_lanes runs on a
/// shifted torus's queues, ring on the torus's cycle's (a communicator per
/// root would not fit 16 in TCM), and a mesh becomes a ring along its cycle.
#[test]
fn broadcast_and_reduce_run_from_every_root() {
    use SipTopology::{Mesh2dNoWrap, Ring1d, Torus2d};
    let cases = [
        (Ring1d, 2, 1, "ring"),
        (Ring1d, 5, 1, "ring"),
        (Ring1d, 16, 1, "ring"),
        (Ring1d, 5, 1, "tree"),
        (Torus2d, 3, 3, "hier_lanes"),
        (Torus2d, 4, 4, "ring"),
        (Mesh2dNoWrap, 2, 3, "ring"),
    ];
    let elems = 40;
    for (topology, w, h, entry) in cases {
        let sys = grid_of(topology, w, h);
        let n = w * h;
        let mut pg = pg(&sys, entry, DataMode::Functional);
        pg.spawn(n, |ctx| {
            let r = ctx.rank();
            let t = ctx.empty((1, elems), DPPolicy::cube_rows(1))?;
            for root in 0..n {
                let at = format!("{entry} on {n} ranks, root {root}, rank {r}");
                ctx.write(&t, &input_of(r, elems))?;
                ctx.broadcast(&t, root)?;
                assert_eq!(ctx.read(&t)?, input_of(root, elems), "broadcast: {at}");
                ctx.write(&t, &input_of(r, elems))?;
                ctx.reduce(&t, ReduceOp::Sum, root)?;
                if r == root {
                    let sum = |i| f16::from_f32((0..n as usize).map(|q| value(q, i)).sum());
                    let want: Vec<f32> = (0..elems).map(|i| sum(i).to_f32()).collect();
                    assert_eq!(ctx.read(&t)?, want, "reduce: {at}");
                }
            }
            Ok(())
        })
        .unwrap();
    }
}

/// A root outside the world, or ranks naming different roots for the same
/// broadcast, fail with the root and the calls named.
#[test]
fn a_root_must_exist_and_be_the_same_on_every_rank() {
    let sys = sips(2, 1, 1);
    let mut pg = pg(&sys, "ring", DataMode::TimingOnly);
    let e = pg
        .spawn(2, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            ctx.broadcast(&t, 2)?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("broadcast root 2: the world has ranks 0..2; allowed: a root below 2"),
        "{e}"
    );
    let e = within_a_minute(move || {
        let mut pg = init_process_group(
            &sips(2, 1, 1),
            &CclConfig::embedded_default(),
            "ring",
            DataMode::TimingOnly,
        )
        .unwrap();
        pg.spawn(2, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            ctx.reduce(&t, ReduceOp::Sum, ctx.rank())?;
            Ok(())
        })
        .unwrap_err()
        .to_string()
    });
    assert!(
        e.contains("rank(s) 0 called reduce(64 B, sum, root 0, buffer at offset 0) but rank 1 called reduce(64 B, sum, root 1, buffer at offset 0)"),
        "{e}"
    );
}

/// torus_trees lays its trees on the SIP grid: a subgroup (a logical ring)
/// is refused, naming the algorithm, the group and the algorithms that
/// run it; under `auto` the tuner picks one of those for the subgroup.
#[test]
fn a_grid_algorithm_refuses_a_subgroup_and_auto_picks_another() {
    let sys = grid_of(SipTopology::Torus2d, 3, 3);
    let mut pg = pg(&sys, "torus_trees", DataMode::TimingOnly);
    let e = pg.new_group(&[4, 0, 8]).unwrap_err().to_string();
    assert!(
        e.contains("torus_trees (torus_trees): the group of SIPs [4, 0, 8] is a logical ring, not the machine's SIP grid")
            && e.contains("allowed for this group: algorithm ring, bidir_ring, tree, dbtree, dims or hier_lanes"),
        "{e}"
    );
    let ccl = CclConfig::embedded_default();
    let mut pg =
        kernbench::autotune::init_process_group(&sys, &ccl, "auto", DataMode::Functional).unwrap();
    let g = pg.new_group(&[4, 0, 8]).unwrap();
    let picked = Mutex::new(Vec::new());
    pg.spawn(9, |ctx| {
        let r = ctx.rank();
        let t = ctx.empty((1, 64), DPPolicy::cube_rows(1))?;
        ctx.write(&t, &input_of(r, 64))?;
        if [4, 0, 8].contains(&r) {
            let res = ctx.collective(g, Collective::Broadcast, &t, ReduceOp::Sum)?;
            assert_eq!(ctx.read(&t)?, input_of(4, 64), "rank {r}");
            picked.lock().unwrap().push(res.algorithm);
        }
        Ok(())
    })
    .unwrap();
    let picked = picked.into_inner().unwrap();
    assert_eq!(picked.len(), 3);
    assert!(
        picked.iter().all(|a| a == &picked[0] && a != "torus_trees"),
        "{picked:?}"
    );
}

/// A released group gives its slot areas back (the TCM is as before it was
/// made), and a collective on it afterwards is refused by name.
#[test]
fn a_released_group_frees_its_memory_and_refuses_collectives() {
    let sys = sips(2, 1, 1);
    let mut pg = pg(&sys, "ring", DataMode::TimingOnly);
    let free = |pg: &ProcessGroup| pg.machine.memory.free_below(Space::Tcm, 0);
    let before = free(&pg);
    let pair = pg.new_group(&[0, 1]).unwrap();
    assert!(free(&pg) < before);
    pg.release(pair).unwrap();
    assert_eq!(free(&pg), before);
    let e = pg
        .spawn(2, |ctx| {
            let t = ctx.empty((1, 64), DPPolicy::cube_rows(1))?;
            ctx.collective(pair, Collective::AllReduce, &t, ReduceOp::Sum)?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("group 'group1[0, 1]' has no communicator: it was released (ProcessGroup::release); allowed: collectives on groups not released, or a new group over ranks [0, 1]"),
        "{e}"
    );
}

/// A rank's record of works: only what it waited for between
/// `record_works` and `take_work_record`, each with its class, stream and
/// the times its wait gave.
#[test]
fn a_rank_records_the_works_it_waits_for_while_recording() {
    let sys = sips(2, 2, 1);
    let mut pg = pg(&sys, "ring", DataMode::TimingOnly);
    let cubes = sys.cubes_per_sip();
    pg.spawn(2, |ctx| {
        let t = ctx.empty((cubes as usize, 256), DPPolicy::cube_rows(cubes))?;
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        ctx.record_works()?;
        let w = ctx.all_reduce_async(&t, ReduceOp::Sum)?;
        let ran = ctx.wait(&w)?;
        let record = ctx.take_work_record()?;
        assert_eq!(record.len(), 1);
        assert_eq!(
            record[0].class,
            WorkClass::Collective(Collective::AllReduce)
        );
        assert_eq!(record[0].class.name(), "all_reduce");
        assert_eq!(record[0].stream, w.stream());
        assert_eq!((record[0].start, record[0].end), (ran.start, ran.end));
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        assert!(
            ctx.take_work_record()?.is_empty(),
            "taking stops the record"
        );
        Ok(())
    })
    .unwrap();
}

/// Traffic whose start panics: a bug inside the simulation.
struct PanickingTraffic;

impl kernbench_systems::traffic::Traffic for PanickingTraffic {
    fn start(&mut self, _: &mut kernbench_systems::traffic::Injector) {
        panic!("traffic bug");
    }
    fn on_arrival(
        &mut self,
        _: kernbench_systems::traffic::Arrival,
        _: &mut kernbench_systems::traffic::Injector,
    ) {
    }
}

/// A panic inside the simulation while ranks wait on a collective fails
/// the spawn with the panic's message; no rank waits for ever on a
/// scheduler that unwound.
#[test]
fn a_panic_inside_the_simulation_fails_spawn_and_never_hangs() {
    let e = within_a_minute(|| {
        let mut pg = pg(&sips(4, 1, 1), "ring", DataMode::TimingOnly);
        pg.machine.engine.set_traffic(PanickingTraffic);
        pg.spawn(4, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            ctx.all_reduce(&t, ReduceOp::Sum)?;
            Ok(())
        })
        .unwrap_err()
        .to_string()
    });
    assert!(
        e.starts_with("aborted: the simulation panicked: traffic bug (a kernbench bug"),
        "{e}"
    );
}
