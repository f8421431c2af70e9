//! Collectives on a rank's tensor: lane-wise by default (the shard at (cube
//! c, pe p) meets the shard at (c, p) of the other ranks, element-wise over
//! the group's ranks), the replica reduction under `DPPolicy::replicas`,
//! and the layouts each refuses.

use crate::common::system;
use kernbench::ccl::{AUTO, CclConfig, Collective, ReduceOp};
use kernbench::dist::{DPPolicy, GroupId, ProcessGroup, Rank, Split, init_process_group};
use kernbench::spec::System;
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
        ("columns over cubes", policy(ColumnWise, Replicate, 2, 1), (2, 16)),
        ("replicated over cubes", policy(Replicate, Replicate, 2, 1), (2, 8)),
        ("one cube", policy(RowWise, Replicate, 1, 1), (2, 8)),
        ("rows over cubes and PEs", policy(RowWise, RowWise, 2, 2), (8, 8)),
        ("columns over PEs", policy(Replicate, ColumnWise, 1, 2), (2, 16)),
        ("replicated over PEs", policy(RowWise, Replicate, 2, 2), (4, 8)),
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
    panic!("{}", refused.join("\n"));
}
