//! Collective autotuning: the pick is the fastest candidate, decisions come
//! back from the cache without simulating, bad caches are rebuilt, and the
//! heterogeneous protocol agrees on one config, times it as the
//! MAX over the ranks that have it, and runs fallbacks correctly.

use crate::common;
use kernbench::autotune::{self, Tuner, bucket, hetero};
use kernbench::ccl::{CclConfig, Collective, Group, Job, ReduceOp};
use kernbench::spec::System;

/// The default system made small: 4 SIPs of 2×1 cubes with 2 PEs.
fn small() -> System {
    common::system(|s| {
        s.sip.cube_mesh.w = 2;
        s.sip.cube_mesh.h = 1;
        s.cube.pe_layout.corners = 1;
    })
}

#[test]
fn buckets_are_powers_of_two_from_1k() {
    assert_eq!(
        [1, 1024, 1025, 4096, 5000, 1 << 26].map(bucket),
        [1024, 1024, 2048, 4096, 8192, 1 << 26]
    );
}

/// auto never picks a config slower than another candidate: each recorded
/// time equals an independent run of that candidate, and the pick is the
/// least of them (the first on a tie).
#[test]
fn the_pick_is_the_fastest_candidate_in_every_bucket() {
    let sys = small();
    let ccl = CclConfig::embedded_default();
    let mut tuner = Tuner::new(&sys, &ccl);
    let n = Group::new(&sys).size();
    for collective in Collective::ALL {
        for bytes in [1024u64, 65_536] {
            let d = tuner.decide(collective, bytes).unwrap();
            let mut least = u64::MAX;
            for t in &d.timings {
                let config = tuner
                    .candidates()
                    .iter()
                    .find(|c| c.name == t.config)
                    .unwrap();
                let job = Job {
                    collective,
                    op: ReduceOp::Sum,
                    elems: (d.tuned_bytes / 2) as usize,
                };
                let again = autotune::measure(&sys, config, job).ok();
                assert_eq!(t.ticks, again, "{collective} {bytes} {}", t.config);
                least = least.min(t.ticks.unwrap_or(u64::MAX));
            }
            assert_eq!(d.ticks, least, "{collective} {bytes}");
            let first = d.timings.iter().find(|t| t.ticks == Some(least)).unwrap();
            assert_eq!(d.config, first.config);
            if collective == Collective::AllToAll {
                assert_eq!(d.tuned_bytes % (2 * n as u64), 0);
            }
        }
    }
}

#[test]
fn a_second_run_reads_the_cache_and_retune_ignores_it() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, ccl) = (small(), CclConfig::embedded_default());
    let mut first = Tuner::new(&sys, &ccl).with_cache(dir.path(), false);
    let d1 = first.decide(Collective::AllReduce, 3000).unwrap();
    assert!(first.simulations > 0);
    let mut second = Tuner::new(&sys, &ccl).with_cache(dir.path(), false);
    // Same bucket (4 KiB), from the file: no simulation.
    assert_eq!(second.decide(Collective::AllReduce, 4096).unwrap(), d1);
    assert_eq!(second.simulations, 0);
    let mut retune = Tuner::new(&sys, &ccl).with_cache(dir.path(), true);
    assert_eq!(retune.decide(Collective::AllReduce, 4096).unwrap(), d1);
    assert_eq!(retune.simulations, first.simulations);
}

/// A truncated file (an interrupted write elsewhere) and a file of another
/// spec are rejected, re-tuned and rewritten; a leftover temporary file is
/// ignored.
#[test]
fn corrupt_and_foreign_cache_files_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let ccl = CclConfig::embedded_default();
    let (a, b) = (small(), small().with_sips(2).unwrap());
    let mut ta = Tuner::new(&a, &ccl).with_cache(dir.path(), false);
    let da = ta.decide(Collective::AllReduce, 1024).unwrap();
    let files = || {
        let mut f: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        f.sort();
        f
    };
    let file_a = files()[0].clone();
    // Truncated, plus a temporary file a killed tune left behind.
    let text = std::fs::read_to_string(&file_a).unwrap();
    std::fs::write(&file_a, &text[..text.len() / 2]).unwrap();
    std::fs::write(file_a.with_extension("json.tmp999"), "{").unwrap();
    let mut again = Tuner::new(&a, &ccl).with_cache(dir.path(), false);
    assert_eq!(again.decide(Collective::AllReduce, 1024).unwrap(), da);
    assert!(again.simulations > 0);
    assert!(
        again.rebuilt[0].contains("is corrupt"),
        "{:?}",
        again.rebuilt
    );
    // Spec b's decision file overwritten with spec a's content.
    let mut tb = Tuner::new(&b, &ccl).with_cache(dir.path(), false);
    tb.decide(Collective::AllReduce, 1024).unwrap();
    let file_b = files().into_iter().find(|f| *f != file_a).unwrap();
    std::fs::copy(&file_a, &file_b).unwrap();
    let mut tb2 = Tuner::new(&b, &ccl).with_cache(dir.path(), false);
    let db = tb2.decide(Collective::AllReduce, 1024).unwrap();
    assert!(
        tb2.rebuilt[0].contains("another system spec"),
        "{:?}",
        tb2.rebuilt
    );
    assert_ne!(db.timings, da.timings, "spec b re-tuned on its own machine");
}

const SEED_CCL: &str =
    "defaults: { algorithm: ring, buffer_kind: hbm, n_slots: 2, slot_size: 4096, chunks: 1 }
autotune: { configs: [ring, ring_sram] }
algorithms:
  ring: { algorithm: ring }
  ring_sram: { algorithm: ring, buffer_kind: sram, n_slots: 8 }
";

/// Seed 001's scenario: ranks 0-1 support an extra config, ranks 2-3 do
/// not. Their kind (h100) has a narrow HBM port but SRAM for receive slots,
/// so receiving into SRAM relieves the ring's slowest stage.
fn seed_system() -> System {
    let yaml = kernbench::spec::DEFAULT_SYSTEM_YAML.replace(
        "    topology: ring_1d          # ring_1d | torus_2d | mesh_2d_no_wrap",
        "    topology: ring_1d\n    kinds: { h100: [0, 1], a100: [\"2..4\"] }",
    ) + "sip_kinds:\n  h100: { memory: { hbm: { bandwidth_gbps: 16.0 } }, capabilities: [ring, ring_sram] }\n  a100: { capabilities: [ring] }\n";
    let sys = System::from_yaml(&yaml, "seed").unwrap();
    let mut spec = sys.spec;
    spec.sip.cube_mesh.w = 1;
    spec.sip.cube_mesh.h = 1;
    System::from_spec(spec, "seed").unwrap()
}

#[test]
fn seed_001_four_ranks_agree_and_ranks_without_the_pick_fall_back() {
    let sys = seed_system();
    let ccl = CclConfig::from_yaml(SEED_CCL, "seed").unwrap();
    let o = hetero::autotune(&sys, &ccl, Collective::AllReduce, 16_384).unwrap();
    assert_eq!(o.unified, ["ring", "ring_sram"]);
    assert_eq!(
        o.available,
        [[true, true], [true, true], [true, false], [true, false]]
    );
    // The table is the MAX over the ranks that have the config.
    for (i, t) in o.timings.iter().enumerate() {
        let max = o.measured[i].iter().flatten().max().copied();
        assert_eq!(*t, max, "config {}", o.unified[i]);
    }
    assert_eq!(o.measured[1][2], None);
    assert_eq!(o.unified[o.best], "ring_sram", "{:?}", o.timings);
    assert!(o.timings[1] < o.timings[0]);
    assert_eq!(o.ran, ["ring_sram", "ring_sram", "ring", "ring"]);
    assert_eq!(o.correct, Some(true));
}

#[test]
fn a_capability_that_is_no_candidate_names_the_kind() {
    let sys = seed_system();
    let ccl =
        CclConfig::from_yaml(&SEED_CCL.replace("[ring, ring_sram] }", "[ring] }"), "seed").unwrap();
    let e = hetero::autotune(&sys, &ccl, Collective::AllReduce, 4096)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sip_kinds.h100.capabilities: 'ring_sram' is not an autotune candidate")
            && e.contains("allowed: ring"),
        "{e}"
    );
}

/// The `autotune:` axes cross every config, config-major, named by setting.
#[test]
fn autotune_axes_make_a_named_grid() {
    let yaml =
        "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 4096, chunks: 1 }
autotune: { configs: [ring, tree], buffer_kind: [tcm, sram], n_slots: [2, 8] }
algorithms:
  ring: { algorithm: ring }
  tree: { algorithm: tree, chunks: auto }
";
    let ccl = CclConfig::from_yaml(yaml, "grid").unwrap();
    let names: Vec<&str> = ccl.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ring/tcm/2x4096/c1",
            "ring/tcm/8x4096/c1",
            "ring/sram/2x4096/c1",
            "ring/sram/8x4096/c1",
            "tree/tcm/2x4096/cauto",
            "tree/tcm/8x4096/cauto",
            "tree/sram/2x4096/cauto",
            "tree/sram/8x4096/cauto",
        ]
    );
    let bad = CclConfig::from_yaml(&yaml.replace("[2, 8]", "[0]"), "grid").unwrap_err();
    assert!(bad.to_string().contains("autotune.n_slots"), "{bad}");
}

/// `algorithm: auto` in a process group: each collective runs the tuner's
/// pick for its size bucket and group, installed on first use, and takes
/// exactly the time the tuner measured for it on a fresh machine; the
/// result is correct; a bucket is tuned once however often it is called.
#[test]
fn a_process_group_under_auto_runs_each_buckets_pick() {
    use kernbench::autotune::init_process_group;
    use kernbench::dist::{DPPolicy, WORLD};
    use kernbench_systems::memory::DataMode;
    use std::sync::Mutex;
    let (sys, ccl) = (small(), CclConfig::embedded_default());
    let mut pg = init_process_group(&sys, &ccl, "auto", DataMode::Functional).unwrap();
    let pair = pg.new_group(&[0, 1]).unwrap();
    let (n, cubes) = (pg.world_size, sys.cubes_per_sip() as usize);
    // Per participant: 1 KiB (dims), 1 MiB (bidir_ring_deep), 1 KiB again (the first bucket's
    // communicator reused), then 64 KiB over ranks 0 and 1.
    let sizes = [512usize, 524_288, 512];
    let seen = Mutex::new(Vec::new());
    pg.spawn(n, |ctx| {
        let mut mine = Vec::new();
        for &elems in &sizes {
            let t = ctx.empty((cubes, elems), DPPolicy::cube_replicas(cubes as u32))?;
            ctx.write(&t, &vec![ctx.rank() as f32 + 1.0; cubes * elems])?;
            let r = ctx.all_reduce(&t, ReduceOp::Sum)?;
            let want = (1..=n).sum::<u32>() as f32 * cubes as f32;
            assert!(ctx.read(&t)?.iter().all(|&v| v == want), "{elems}");
            mine.push((WORLD, elems, r));
        }
        if ctx.rank() < 2 {
            let elems = 32_768;
            let t = ctx.empty((cubes, elems), DPPolicy::cube_replicas(cubes as u32))?;
            ctx.write(&t, &vec![1.0; cubes * elems])?;
            let r = ctx.collective(pair, Collective::AllReduce, &t, ReduceOp::Sum)?;
            assert!(ctx.read(&t)?.iter().all(|&v| v == 2.0 * cubes as f32));
            mine.push((pair, elems, r));
        }
        seen.lock().unwrap().extend(mine);
        Ok(())
    })
    .unwrap();
    let mut tuner = Tuner::new(&sys, &ccl);
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 3 * n as usize + 2);
    let mut picks = std::collections::BTreeSet::new();
    for (g, elems, r) in seen {
        picks.insert((g == WORLD, r.algorithm.clone()));
        let members = if g == WORLD {
            Group::new(&sys)
        } else {
            Group::of_sips(&sys, &[0, 1]).unwrap()
        };
        let d = tuner
            .decide_in(&members, Collective::AllReduce, 2 * elems as u64)
            .unwrap();
        assert_eq!(r.algorithm, d.config, "{elems}");
        assert_eq!(r.ticks, d.ticks, "{elems} ran {}", r.algorithm);
    }
    // Three buckets (1 KiB and 1 MiB of the world, 64 KiB of the pair),
    // each tuned once: as many simulations as a fresh tuner needs for them.
    let picker = pg.tuner.as_ref().unwrap().as_any();
    let pg_tuner = picker.downcast_ref::<Tuner>().unwrap();
    assert_eq!(pg_tuner.simulations, tuner.simulations);
    // One communicator per distinct pick of each group, installed once.
    let installed: usize = [WORLD, pair].iter().map(|&g| pg.group(g).comms.len()).sum();
    assert_eq!(installed, picks.len(), "{picks:?}");
    let want = [(false, "rhd"), (true, "bidir_ring_deep"), (true, "dims")];
    assert_eq!(picks, want.map(|(w, a)| (w, a.to_string())).into());
}

/// A sweep axis `algorithm: auto`: each auto point runs its bucket's
/// decision from the cache when the cache holds one (a planted decision is
/// obeyed), else tunes it and stores it; the row names the pick.
#[test]
fn a_sweep_point_under_auto_runs_the_cached_pick() {
    use kernbench::autotune::cache::{Cache, Lookup};
    use kernbench::autotune::{Decision, group_key};
    use kernbench::sweep::{Options, Plan, run};
    let plan = Plan::from_yaml(
        "name: auto\nbase:\n  sip.cube_mesh.w: 1\n  sip.cube_mesh.h: 1\nstudies:\n  - name: s\n    grid:\n      algorithm: [auto, ring]\n      bytes: [1K, 1M]\n",
        "auto.yaml",
    )
    .unwrap();
    let sys = plan.resolve(&plan.points()[0]).unwrap().system;
    let ccl = CclConfig::embedded_default();
    let (cache_dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut tuner = Tuner::new(&sys, &ccl);
    let (all, mib) = (Group::new(&sys), 1u64 << 20);
    let key = tuner.cache_key(Collective::AllReduce, &all, mib);
    assert_eq!(key.group, group_key(&all));
    let planted = Decision {
        collective: "all_reduce".into(),
        bucket_bytes: mib,
        tuned_bytes: mib,
        config: "tree".into(),
        ticks: 1,
        timings: Vec::new(),
    };
    let cache = Cache::new(cache_dir.path());
    cache.put(&key, &planted).unwrap();
    let opts = Options {
        autotune_cache: Some(cache_dir.path().to_path_buf()),
        ..Options::new(out.path().join("r"), 1)
    };
    let outcome = run(&plan, &opts).unwrap();
    let auto: Vec<_> = outcome
        .rows
        .iter()
        .filter(|r| r.algorithm == "auto")
        .collect();
    assert_eq!(auto.len(), 2);
    for r in auto {
        assert!(r.error.is_empty(), "{}", r.error);
        let bytes = r.bytes.unwrap();
        let tree = ccl.entry("tree").unwrap();
        let job = Job {
            collective: Collective::AllReduce,
            op: ReduceOp::Sum,
            elems: (bytes / 2) as usize,
        };
        let (pick, ticks) = if bytes == mib {
            (
                "tree".to_string(),
                autotune::measure(&sys, tree, job).unwrap(),
            )
        } else {
            let d = tuner.decide(Collective::AllReduce, bytes).unwrap();
            (d.config, d.ticks)
        };
        assert_eq!((&r.autotuned, r.ticks), (&pick, Some(ticks)), "{bytes}");
        assert_eq!(
            r.implementation,
            tuner
                .candidates()
                .iter()
                .find(|c| c.name == pick)
                .unwrap()
                .algorithm
        );
    }
    // The 1 KiB bucket was tuned by the sweep and stored.
    let small = tuner.cache_key(Collective::AllReduce, &all, 1024);
    assert!(matches!(cache.get(&small), Lookup::Hit(_)));
}

/// A long program under `auto`: all six collectives at 1 KiB, 64 KiB and
/// 16 MiB per participant, twice over, on one process group of 4 SIPs of
/// 2 cubes with 3 MiB of TCM per PE. Every new pick installs a
/// communicator, and the picks need more TCM together (3.5 MiB on a cube
/// leader) than a PE has: the group keeps those that fit and
/// releases the least recently used when a new one does not. What that
/// guarantees, asserted here: the program completes; some communicators
/// were released; and what each TCM holds for the group's communicators is
/// exactly the slot areas of those still installed (a released one holds
/// nothing), at most the TCM's size.
#[test]
fn a_long_auto_program_releases_the_least_recently_used_communicator() {
    use kernbench::autotune::init_process_group;
    use kernbench::dist::{DPPolicy, WORLD};
    use kernbench::spec::SipTopology;
    use kernbench_systems::memory::DataMode;
    use kernbench_systems::program::Space;
    let mut spec = common::sweep_base(4, SipTopology::Ring1d, 2, (2, 1)).spec;
    spec.memory.tcm.size_bytes = 3 << 20;
    let sys = System::from_spec(spec, "3 MiB of TCM").unwrap();
    let ccl = CclConfig::embedded_default();
    let mut pg = init_process_group(&sys, &ccl, "auto", DataMode::TimingOnly).unwrap();
    let cubes = sys.cubes_per_sip() as usize;
    let collectives = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
    ];
    pg.spawn(pg.world_size, |ctx| {
        for _ in 0..2 {
            for &elems in &[512usize, 32_768, 8 << 20] {
                let t = ctx.empty((cubes, elems), DPPolicy::cube_replicas(cubes as u32))?;
                for &c in &collectives {
                    ctx.collective(WORLD, c, &t, ReduceOp::Sum)?;
                }
                ctx.free(t)?;
            }
        }
        Ok(())
    })
    .unwrap();
    let world = pg.group(WORLD);
    assert!(world.releases > 0, "every pick fit: nothing was released");
    let m = &pg.machine;
    let tcm = m.memory.size(Space::Tcm);
    let mut used = 0;
    for pe in 0..m.topology.n_pes() as u32 {
        let free: u64 = m
            .memory
            .free_ranges(Space::Tcm, pe)
            .iter()
            .map(|r| r.1)
            .sum();
        used += tcm - free;
    }
    let held: u64 = world
        .comms
        .iter()
        .map(|c| m.scope_bytes(c.scope, Space::Tcm))
        .sum();
    assert_eq!(
        used, held,
        "TCM bytes in use against those of installed communicators"
    );
    assert!(held > 0 && world.comms.len() > 1, "{}", world.comms.len());
}

/// Picks `ring` for all-reduce and `tree` for everything else.
struct RingOrTree(Vec<kernbench::ccl::AlgoConfig>);

impl kernbench::dist::ConfigPicker for RingOrTree {
    fn pick(
        &mut self,
        _: &Group,
        collective: Collective,
        _: u64,
    ) -> Result<&kernbench::ccl::AlgoConfig, kernbench::ccl::CclError> {
        Ok(&self.0[usize::from(collective != Collective::AllReduce)])
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The tick at which `calls` end, run one after another over the world
/// of a process group of `sys` under entry `entry` (`auto`: picked by
/// [`RingOrTree`]), and how many communicators the world released.
fn end_of(sys: &System, entry: &str, calls: &[Collective]) -> (u64, usize) {
    use kernbench::dist::{DPPolicy, WORLD};
    use kernbench_systems::memory::DataMode;
    let ccl = CclConfig::embedded_default();
    let configs = ["ring", "tree"].map(|n| ccl.entry(n).unwrap().clone());
    let mut pg = autotune::init_process_group(sys, &ccl, entry, DataMode::TimingOnly).unwrap();
    if pg.tuner.is_some() {
        pg.tuner = Some(Box::new(RingOrTree(configs.to_vec())));
    }
    let start = pg.machine.engine.now();
    pg.spawn(pg.world_size, |ctx| {
        let t = ctx.empty((1, 2048), DPPolicy::cube_rows(1))?;
        for &c in calls {
            ctx.collective(WORLD, c, &t, ReduceOp::Sum)?;
        }
        Ok(())
    })
    .unwrap();
    (pg.machine.engine.now() - start, pg.group(WORLD).releases)
}

/// Releasing is honest: ring's and tree's slot areas take 512 KiB of each
/// PE's TCM. On a TCM of 768 KiB, all-reduce (ring), broadcast (tree),
/// all-reduce releases ring for tree and tree for ring, and the program
/// ends later than on 1 MiB (no release) by exactly ring's install: what
/// an all-reduce under auto takes beyond one on a ring installed up front.
#[test]
fn a_released_communicator_pays_its_install_again() {
    use kernbench::spec::SipTopology;
    let with_tcm = |bytes: u64| {
        let mut spec = common::sweep_base(4, SipTopology::Ring1d, 2, (1, 1)).spec;
        spec.memory.tcm.size_bytes = bytes;
        System::from_spec(spec, "tcm").unwrap()
    };
    let (roomy, tight) = (with_tcm(1 << 20), with_tcm(768 << 10));
    let (ar, bc) = (Collective::AllReduce, Collective::Broadcast);
    let install = end_of(&roomy, "auto", &[ar]).0 - end_of(&roomy, "ring", &[ar]).0;
    assert!(install > 0);
    let program = [ar, bc, ar];
    let (kept, no_release) = end_of(&roomy, "auto", &program);
    let (reinstalled, releases) = end_of(&tight, "auto", &program);
    assert_eq!((no_release, releases), (0, 2));
    assert_eq!(reinstalled, kept + install);
}

/// Kinds that omit `capabilities` support every candidate: the protocol
/// times every one of the embedded ccl.yaml's 14 that has the collective,
/// each on its own communicator released after its timing, so their slot
/// areas never pile up in TCM.
#[test]
fn kinds_without_capabilities_tune_every_candidate() {
    let yaml = kernbench::spec::DEFAULT_SYSTEM_YAML.replace(
        "    topology: ring_1d          # ring_1d | torus_2d | mesh_2d_no_wrap",
        "    topology: ring_1d\n    kinds: { fast: [0, 1] }",
    ) + "sip_kinds:\n  fast: { memory: { hbm: { bandwidth_gbps: 512.0 } } }\n";
    let mut spec = System::from_yaml(&yaml, "no capabilities").unwrap().spec;
    (spec.sip.cube_mesh.w, spec.sip.cube_mesh.h) = (1, 1);
    let sys = System::from_spec(spec, "no capabilities").unwrap();
    let ccl = CclConfig::embedded_default();
    let o = hetero::autotune(&sys, &ccl, Collective::AllReduce, 4096).unwrap();
    let names: Vec<&str> = ccl.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(o.unified, names);
    assert!(o.available.iter().flatten().all(|&has| has));
    // Timed exactly when the algorithm has the collective (the all-to-all
    // and broadcast-only ones are skipped on every rank).
    for (c, t) in ccl.candidates.iter().zip(&o.timings) {
        let runs = kernbench::ccl::Communicator::supports(c, Collective::AllReduce).is_ok();
        assert_eq!(t.is_some(), runs, "{}", c.name);
    }
    assert_eq!(o.timings.iter().flatten().count(), 10);
    assert_eq!(o.ran, vec![o.unified[o.best].clone(); 4]);
    assert_eq!(o.correct, Some(true));
}

/// The YAML block of docs/guide.md §Heterogeneous systems, verbatim.
fn guide_sip_kinds_example() -> String {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide.md"))
        .expect("docs/guide.md");
    let section = &guide[guide
        .find("### Heterogeneous systems: SIP kinds")
        .expect("the guide has its SIP kinds section")..];
    let start = section.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let end = start + section[start..].find("```").expect("the block ends");
    section[start..end].to_string()
}

/// `over`'s keys replace `base`'s, mappings merged key by key.
fn merge_yaml(base: &mut serde_yaml::Value, over: serde_yaml::Value) {
    match (base, over) {
        (serde_yaml::Value::Mapping(b), serde_yaml::Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge_yaml(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// The guide's SIP kinds example, exactly as written, on the default spec
/// (made one cube per SIP to stay cheap), autotuned for an all-reduce of
/// 256 KiB with the embedded ccl.yaml: the capabilities it names are
/// candidates there, and the ranks whose kind lacks the pick run its
/// same-algorithm fallback.
#[test]
fn the_guides_sip_kinds_example_autotunes_as_written() {
    let mut spec: serde_yaml::Value =
        serde_yaml::from_str(kernbench::spec::DEFAULT_SYSTEM_YAML).unwrap();
    merge_yaml(
        &mut spec,
        serde_yaml::from_str(&guide_sip_kinds_example()).unwrap(),
    );
    let yaml = serde_yaml::to_string(&spec).unwrap();
    let mut spec = System::from_yaml(&yaml, "docs/guide.md").unwrap().spec;
    (spec.sip.cube_mesh.w, spec.sip.cube_mesh.h) = (1, 1);
    let sys = System::from_spec(spec, "docs/guide.md").unwrap();
    let ccl = CclConfig::embedded_default();
    let o = hetero::autotune(&sys, &ccl, Collective::AllReduce, 256 << 10).unwrap();
    assert_eq!(o.unified, ["ring", "bidir_ring", "bidir_ring_deep"]);
    let (h100, a100) = ([true, true, true], [true, true, false]);
    assert_eq!(o.available, [h100, h100, a100, a100]);
    // 16 slots of 16 KiB beat 4 of 64 KiB on the h100s; the a100s, which
    // lack them, run bidir_ring with their own queues.
    assert_eq!(o.unified[o.best], "bidir_ring_deep", "{:?}", o.timings);
    assert!(o.timings[2] < o.timings[1] && o.timings[1] < o.timings[0]);
    assert_eq!(
        o.ran,
        [
            "bidir_ring_deep",
            "bidir_ring_deep",
            "bidir_ring",
            "bidir_ring"
        ]
    );
    assert_eq!(o.correct, Some(true));
}

/// A barrier's token links make room under `auto` like a pick does: on a
/// TCM that ring and tree fill (1 MiB), a barrier after both releases the
/// least recently used pick instead of failing for memory.
#[test]
fn a_barrier_after_picks_that_fill_tcm_releases_one() {
    use kernbench::dist::{DPPolicy, WORLD};
    use kernbench::spec::SipTopology;
    use kernbench_systems::memory::DataMode;
    let mut spec = common::sweep_base(4, SipTopology::Ring1d, 2, (1, 1)).spec;
    spec.memory.tcm.size_bytes = 1 << 20;
    let sys = System::from_spec(spec, "tcm").unwrap();
    let ccl = CclConfig::embedded_default();
    let configs = ["ring", "tree"].map(|n| ccl.entry(n).unwrap().clone());
    let mut pg = autotune::init_process_group(&sys, &ccl, "auto", DataMode::TimingOnly).unwrap();
    pg.tuner = Some(Box::new(RingOrTree(configs.to_vec())));
    pg.spawn(pg.world_size, |ctx| {
        let t = ctx.empty((1, 2048), DPPolicy::cube_rows(1))?;
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        ctx.broadcast(&t, 0)?;
        ctx.barrier(WORLD)?;
        Ok(())
    })
    .unwrap();
    assert_eq!(pg.group(WORLD).releases, 1);
}

/// An asynchronous collective in flight keeps its communicator installed:
/// on a TCM that holds ring or tree but not both (768 KiB), a broadcast
/// (tree) submitted while the all-reduce (ring) may still run is refused
/// naming the communicator in flight and the fix; waiting first releases
/// ring and runs it.
#[test]
fn a_pick_never_releases_a_communicator_with_work_in_flight() {
    use kernbench::dist::{DPPolicy, WORLD};
    use kernbench::spec::SipTopology;
    use kernbench_systems::memory::DataMode;
    let run = |wait_first: bool| {
        let mut spec = common::sweep_base(4, SipTopology::Ring1d, 2, (1, 1)).spec;
        spec.memory.tcm.size_bytes = 768 << 10;
        let sys = System::from_spec(spec, "tcm").unwrap();
        let ccl = CclConfig::embedded_default();
        let configs = ["ring", "tree"].map(|n| ccl.entry(n).unwrap().clone());
        let mut pg =
            autotune::init_process_group(&sys, &ccl, "auto", DataMode::TimingOnly).unwrap();
        pg.tuner = Some(Box::new(RingOrTree(configs.to_vec())));
        let result = pg.spawn(pg.world_size, |ctx| {
            let t = ctx.empty((1, 2048), DPPolicy::cube_rows(1))?;
            let u = ctx.empty((1, 2048), DPPolicy::cube_rows(1))?;
            let reduce = ctx.all_reduce_async(&t, ReduceOp::Sum)?;
            if wait_first {
                ctx.wait(&reduce)?;
            }
            let bcast = ctx.broadcast_async(&u, 0)?;
            if !wait_first {
                ctx.wait(&reduce)?;
            }
            ctx.wait(&bcast)?;
            Ok(())
        });
        (result.map_err(|e| e.to_string()), pg.group(WORLD).releases)
    };
    let (ok, releases) = run(true);
    assert_eq!((ok, releases), (Ok(()), 1));
    let (err, releases) = run(false);
    let err = err.unwrap_err();
    assert_eq!(releases, 0, "{err}");
    for part in [
        "cannot hold",
        "communicator(s) ring of group 'world' run work in flight",
        "wait for that work (Rank::wait) before this collective",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
}
