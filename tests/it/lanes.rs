//! Collectives on a rank's tensor: lane-wise by default (the shard at (cube
//! c, pe p) meets the shard at (c, p) of the other ranks, element-wise over
//! the group's ranks), the replica reduction under `DPPolicy::replicas`,
//! and the layouts each refuses.

use crate::common::system;
use kernbench::ccl::{AUTO, CclConfig, Collective, ReduceOp};
use kernbench::dist::{DPPolicy, GroupId, ProcessGroup, Rank, Split, WORLD, init_process_group};
use kernbench::spec::System;
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;

/// 4 SIPs on a ring, each a 2x1 cube mesh.
fn four_sips() -> System {
    system(|s| {
        s.system.sips.count = 4;
        s.sip.cube_mesh.w = 2;
        s.sip.cube_mesh.h = 1;
    })
}

/// Element `i` of rank `r`'s logical tensor: small integers, so every sum
/// is exact in f16.
fn value(r: u32, i: usize) -> f32 {
    ((r as usize * 5 + i * 3) % 7) as f32
}

fn policy(cube: Split, pe: Split, num_cubes: u32, num_pes: u32) -> DPPolicy {
    DPPolicy {
        cube,
        pe,
        num_cubes,
        num_pes,
        replicas: false,
    }
}

/// The policies a DP all-reduce must serve: split row- or column-wise or
/// replicated over cubes, over the PEs of a cube, and both, with a shape
/// that divides evenly.
fn policies() -> Vec<(&'static str, DPPolicy, (usize, usize))> {
    use Split::{ColumnWise, Replicate, RowWise};
    vec![
        ("rows over cubes", policy(RowWise, Replicate, 2, 1), (4, 8)),
        (
            "columns over cubes",
            policy(ColumnWise, Replicate, 2, 1),
            (2, 16),
        ),
        (
            "replicated over cubes",
            policy(Replicate, Replicate, 2, 1),
            (2, 8),
        ),
        ("one cube", policy(RowWise, Replicate, 1, 1), (2, 8)),
        (
            "rows over cubes and PEs",
            policy(RowWise, RowWise, 2, 2),
            (8, 8),
        ),
        (
            "columns over PEs",
            policy(Replicate, ColumnWise, 1, 2),
            (2, 16),
        ),
        (
            "replicated over PEs",
            policy(RowWise, Replicate, 2, 2),
            (4, 8),
        ),
    ]
}

/// Runs `collective` of group `g` (ranks `members`) on a `shape` tensor
/// under `p` holding each rank's [`value`]s; returns every member's tensor
/// read back, by rank.
fn run_on(
    pg: &mut ProcessGroup,
    (g, members): (GroupId, &[u32]),
    collective: Collective,
    p: DPPolicy,
    shape: (usize, usize),
) -> Result<Vec<(u32, Vec<f32>)>, String> {
    let out = std::sync::Mutex::new(Vec::new());
    let n = pg.world_size;
    pg.spawn(n, |ctx: &mut Rank| {
        let r = ctx.rank();
        if !members.contains(&r) {
            return Ok(());
        }
        let t = ctx.empty(shape, p)?;
        let data: Vec<f32> = (0..shape.0 * shape.1).map(|i| value(r, i)).collect();
        ctx.write(&t, &data)?;
        ctx.collective(g, collective, &t, ReduceOp::Sum)?;
        out.lock().unwrap().push((r, ctx.read(&t)?));
        ctx.free(t)?;
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let mut out = out.into_inner().unwrap();
    out.sort_by_key(|x| x.0);
    Ok(out)
}

/// Every entry of the embedded ccl config but `auto`.
fn entries() -> Vec<String> {
    let ccl = CclConfig::embedded_default();
    ccl.entries
        .iter()
        .filter(|e| e.algorithm != AUTO)
        .map(|e| e.name.clone())
        .collect()
}

/// An all-reduce of a sharded tensor over the DP group {0, 2} of 4 ranks
/// is the element-wise sum over the two ranks, whatever the DPPolicy, for
/// every entry that serves the layout; an entry that does not refuses with
/// a message naming the entry.
#[test]
fn a_dp_all_reduce_sums_each_element_over_the_group_for_every_policy() {
    let sys = four_sips();
    let ccl = CclConfig::embedded_default();
    let mut refused = Vec::new();
    for entry in entries() {
        for (what, p, shape) in policies() {
            let mut pg = match init_process_group(&sys, &ccl, &entry, DataMode::Functional) {
                Ok(pg) => pg,
                Err(e) => {
                    refused.push(format!("{entry}: {e}"));
                    break;
                }
            };
            let dp = pg.new_group(&[0, 2]).unwrap();
            match run_on(&mut pg, (dp, &[0, 2]), Collective::AllReduce, p, shape) {
                Ok(got) => {
                    let want: Vec<f32> = (0..shape.0 * shape.1)
                        .map(|i| value(0, i) + value(2, i))
                        .collect();
                    for (r, got) in got {
                        assert_eq!(got, want, "{entry}, {what}: rank {r}");
                    }
                }
                Err(e) => refused.push(format!("{entry}, {what}: {e}")),
            }
        }
    }
    // Why an entry refuses: all-to-all only, no room for a second
    // communicator's 16 x 32 KiB slots in TCM, ADR-0032's replica layout,
    // a grid algorithm on a ring.
    let why = [
        ("bruck", "does not support the all_reduce collective"),
        ("pairwise", "does not support the all_reduce collective"),
        ("hier_lanes_deep", "cannot hold the IPCQ slot area of queue"),
        ("adr0032", "but validator cube_replicas (ADR-0032's layout"),
        ("torus_trees", "does not support SIP topology ring_1d"),
    ];
    for r in &refused {
        let known = why.iter().find(|(e, _)| r.starts_with(e));
        assert!(known.is_some_and(|(_, m)| r.contains(m)), "{r}");
    }
    let entries_refusing = |e: &str| refused.iter().filter(|r| r.starts_with(e)).count();
    // 15 entries: 8 serve every policy, 7 refuse all of them (torus_trees
    // at init).
    assert_eq!(refused.len(), 6 * policies().len() + 1, "{refused:#?}");
    assert_eq!(entries_refusing("ring,"), 0);
    assert_eq!(entries_refusing("hier_lanes,"), 0);
}

/// The replica reduction, by name: `DPPolicy::cube_replicas` makes every
/// cube a data-parallel replica, so the all-reduce over {0, 2} sums over
/// ranks x cubes (ADR-0032's result), on ring and on the adr0032 entry
/// (whose validator asks for exactly this layout).
#[test]
fn cube_replicas_sum_over_ranks_and_cubes() {
    let sys = four_sips();
    let ccl = CclConfig::embedded_default();
    let shape = (2, 8);
    for entry in ["ring", "adr0032"] {
        let mut pg = init_process_group(&sys, &ccl, entry, DataMode::Functional).unwrap();
        let dp = pg.new_group(&[0, 2]).unwrap();
        let p = DPPolicy::cube_replicas(2);
        let got = run_on(&mut pg, (dp, &[0, 2]), Collective::AllReduce, p, shape).unwrap();
        // Row c of a rank is cube c's replica: every row becomes the sum of
        // both rows of both ranks.
        let cols = shape.1;
        let sum = |j: usize| -> f32 {
            [0, 2]
                .iter()
                .flat_map(|&r| (0..2).map(move |c| value(r, c * cols + j)))
                .sum()
        };
        let want: Vec<f32> = (0..2 * cols).map(|i| sum(i % cols)).collect();
        for (r, got) in got {
            assert_eq!(got, want, "{entry}: rank {r}");
        }
    }
}

/// What rank r's element i must be after a collective (None: anything).
type Expected<'a> = dyn Fn(u32, usize) -> Option<f32> + 'a;

/// The other collectives lane by lane, on rows over cubes (cube c's
/// shard, elements [16c, 16c + 16) of the logical tensor, is lane c): in
/// each lane, group member k (rank 0, then rank 2) owns block k of 2.
#[test]
fn every_collective_acts_shard_by_shard() {
    let sys = four_sips();
    let ccl = CclConfig::embedded_default();
    let (shape, lane, block) = ((4, 8), 16, 8);
    let p = DPPolicy::cube_rows(2);
    let members = [0u32, 2];
    let elems = shape.0 * shape.1;
    // The member owning element i within its lane, and i's place in it.
    let owner = |i: usize| members[(i % lane) / block];
    let cases: [(&str, Collective, &Expected<'_>); 5] = [
        ("ring", Collective::ReduceScatter, &|r, i| {
            (owner(i) == r).then(|| value(0, i) + value(2, i))
        }),
        ("ring", Collective::AllGather, &|_, i| {
            Some(value(owner(i), i))
        }),
        ("ring", Collective::Broadcast, &|_, i| Some(value(0, i))),
        ("tree", Collective::Reduce, &|r, i| {
            (r == 0).then(|| value(0, i) + value(2, i))
        }),
        ("pairwise", Collective::AllToAll, &|r, i| {
            // Block k of member r's lane comes from member k's block r.
            let k = members[(i % lane) / block];
            let me = members.iter().position(|&m| m == r).unwrap();
            Some(value(k, i - (i % lane) + me * block + i % block))
        }),
    ];
    for (entry, collective, want) in cases {
        let mut pg = init_process_group(&sys, &ccl, entry, DataMode::Functional).unwrap();
        let dp = pg.new_group(&members).unwrap();
        let got = run_on(&mut pg, (dp, &members), collective, p, shape).unwrap();
        for (r, got) in got {
            for (i, &g) in got.iter().enumerate().take(elems) {
                if let Some(w) = want(r, i) {
                    assert_eq!(g, w, "{entry} {collective}: rank {r} element {i}");
                }
            }
        }
    }
}

/// Layouts a collective cannot run are refused naming the tensor's policy
/// and what the collective needs.
#[test]
fn bad_layouts_name_the_policy_and_the_need() {
    let sys = four_sips();
    let ccl = CclConfig::embedded_default();
    let refusal = |entry: &str, p: DPPolicy, shape| {
        let mut pg = init_process_group(&sys, &ccl, entry, DataMode::TimingOnly).unwrap();
        run_on(
            &mut pg,
            (WORLD, &[0, 1, 2, 3]),
            Collective::AllReduce,
            p,
            shape,
        )
        .unwrap_err()
    };
    // 5 rows over 2 cubes: lanes of 3 and 2 rows.
    let e = refusal("ring", DPPolicy::cube_rows(2), (5, 8));
    assert!(
        e.contains("the 5x8 tensor of rank 0 (DPPolicy { cube: row_wise, pe: replicate, num_cubes: 2, num_pes: 1, replicas: false }) has shards of [48, 32] B; a collective runs shard by shard (one lane per shard position, every lane the same size)"),
        "{e}"
    );
    // Replicas must be the mapper's participants: every cube leader.
    let e = refusal("ring", DPPolicy::cube_replicas(1), (1, 8));
    assert!(
        e.contains("(DPPolicy { cube: row_wise, pe: replicate, num_cubes: 1, num_pes: 1, replicas: true }) has shards on (cube, pe) [(0, 0)], but validator cube_leaders expects [(0, 0), (1, 0)]"),
        "{e}"
    );
    // Collective buffers live in HBM.
    let mut pg = init_process_group(&sys, &ccl, "ring", DataMode::TimingOnly).unwrap();
    let e = pg
        .spawn(4, |ctx| {
            let t = ctx.empty_in(Space::Sram, (2, 8), DPPolicy::cube_rows(2))?;
            ctx.all_reduce(&t, ReduceOp::Sum).map(|_| ())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("(DPPolicy { cube: row_wise, pe: replicate, num_cubes: 2, num_pes: 1, replicas: false }) lives in sram; collectives read their buffers from HBM: create it with Rank::empty"),
        "{e}"
    );
    // adr0032's layout is the replica one.
    let e = refusal("adr0032", DPPolicy::cube_rows(2), (2, 8));
    assert!(
        e.contains("validator cube_replicas (ADR-0032's layout: every cube a data-parallel replica, reduced over ranks x cubes) expects replicas: create it with DPPolicy::cube_replicas(2)"),
        "{e}"
    );
}

/// Under `auto` the tuner picks each lane's configuration among the
/// entries that serve one lane, and the all-reduce is still the sum over
/// the group's ranks shard by shard.
#[test]
fn auto_picks_a_lane_configuration_and_sums_over_the_group() {
    let sys = four_sips();
    let ccl = CclConfig::embedded_default();
    let mut pg =
        kernbench::autotune::init_process_group(&sys, &ccl, "auto", DataMode::Functional).unwrap();
    let dp = pg.new_group(&[0, 2]).unwrap();
    let (p, shape) = (DPPolicy::cube_rows(2), (4, 8));
    let got = run_on(&mut pg, (dp, &[0, 2]), Collective::AllReduce, p, shape).unwrap();
    let want: Vec<f32> = (0..32).map(|i| value(0, i) + value(2, i)).collect();
    for (r, got) in got {
        assert_eq!(got, want, "rank {r}");
    }
    let comms = &pg.group(dp).comms;
    assert!(
        comms.len() == 1 && comms[0].lanes,
        "one lane-wise communicator"
    );
}

/// A lane-wise result counts the lanes that ran times the group's SIPs:
/// one cube's shard over {0, 2} is 2 participants, both cubes' 4; a
/// replica reduction counts every cube leader of every member.
#[test]
fn participants_are_the_lanes_run_times_the_members() {
    let sys = four_sips();
    let ccl = CclConfig::embedded_default();
    let mut pg = init_process_group(&sys, &ccl, "ring", DataMode::TimingOnly).unwrap();
    let dp = pg.new_group(&[0, 2]).unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    pg.spawn(4, |ctx| {
        if ctx.rank() % 2 == 1 {
            return Ok(());
        }
        // Replicas first: their shards need one offset in every cube.
        for p in [
            DPPolicy::cube_replicas(2),
            DPPolicy::cube_rows(1),
            DPPolicy::cube_rows(2),
        ] {
            let t = ctx.empty((p.num_cubes as usize, 64), p)?;
            let res = ctx.collective(dp, Collective::AllReduce, &t, ReduceOp::Sum)?;
            seen.lock().unwrap().push((ctx.rank(), res.participants));
        }
        Ok(())
    })
    .unwrap();
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(seen, [(0, 2), (0, 4), (0, 4), (2, 2), (2, 4), (2, 4)]);
}
