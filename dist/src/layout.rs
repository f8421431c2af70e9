//! Mappers and validators, chosen by name in ccl.yaml.
//!
//! A *mapper* says which PEs of a rank's SIP take part in a replica
//! reduction (a tensor whose `DPPolicy::replicas` is set: every shard one
//! participant); a *validator* checks that a tensor handed to a collective
//! has the shard layout the entry needs. A tensor without `replicas` runs
//! lane-wise whatever the mapper ([`lanes`] checks it). The registries
//! below are the extension point: add a function and its name.

use super::tensor::Tensor;
use kernbench_ccl::config::{MAPPERS, VALIDATORS};

/// Which (cube, pe) of a SIP with `cubes` cubes of `pes` PEs take part.
pub type Mapper = fn(cubes: u32, pes: u32) -> Vec<(u32, u32)>;

/// Checks a tensor's shards for a SIP of `cubes` cubes of `pes` PEs.
pub type Validator = fn(t: &Tensor, cubes: u32, pes: u32) -> Result<(), String>;

/// Each cube's leader PE (pe0): the participants of every algorithm of the
/// collective library, whose algorithms wire every cube's pe0 of every SIP.
fn leader_only(cubes: u32, _pes: u32) -> Vec<(u32, u32)> {
    (0..cubes).map(|c| (c, 0)).collect()
}

/// Every PE of every cube.
fn all_pes(cubes: u32, pes: u32) -> Vec<(u32, u32)> {
    (0..cubes)
        .flat_map(|c| (0..pes).map(move |p| (c, p)))
        .collect()
}

/// The mapper named `name`; Err names the known ones.
pub fn mapper(name: &str) -> Result<Mapper, String> {
    match name {
        "leader_only" => Ok(leader_only),
        "all_pes" => Ok(all_pes),
        _ => Err(format!(
            "unknown mapper '{name}'; allowed: {}",
            MAPPERS.join(", ")
        )),
    }
}

/// The validator named `name`; Err names the known ones.
pub fn validator(name: &str) -> Result<Validator, String> {
    match name {
        "cube_leaders" => Ok(cube_leaders),
        "cube_replicas" => Ok(cube_replicas),
        "single_shard_per_rank" => Ok(single_shard_per_rank),
        "multi_pe_sip_local" => Ok(multi_pe_sip_local),
        _ => Err(format!(
            "unknown validator '{name}'; allowed: {}",
            VALIDATORS.join(", ")
        )),
    }
}

/// The validator a mapper implies for a replica reduction when ccl.yaml
/// names none (a lane-wise collective needs none beyond [`lanes`]).
pub fn default_validator(mapper: &str) -> &'static str {
    match mapper {
        "all_pes" => "multi_pe_sip_local",
        _ => "cube_leaders",
    }
}

/// The shards' (cube, pe) against the expected list, and equal sizes.
fn expect_layout(t: &Tensor, want: &[(u32, u32)], what: &str) -> Result<(), String> {
    let got: Vec<(u32, u32)> = t.shards.iter().map(|s| (s.cube, s.pe)).collect();
    if got != want {
        return Err(format!(
            "the tensor of rank {} ({}) has shards on (cube, pe) {:?}, but {what} expects {:?}: create it with a DPPolicy that gives that layout (e.g. DPPolicy::cube_replicas(cubes) with shape (cubes, n))",
            t.rank,
            t.policy.describe(),
            got,
            want
        ));
    }
    let sizes: Vec<u64> = t.shards.iter().map(|s| s.nbytes).collect();
    if sizes.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!(
            "the tensor of rank {} ({}) has shards of unequal sizes {sizes:?} B; {what} expects every shard the same size: give the split level a multiple of its parts",
            t.rank,
            t.policy.describe()
        ));
    }
    Ok(())
}

/// One shard per cube, on its leader PE (the per-cube replica layout the
/// collective library works in).
fn cube_leaders(t: &Tensor, cubes: u32, pes: u32) -> Result<(), String> {
    expect_layout(t, &leader_only(cubes, pes), "validator cube_leaders")
}

/// ADR-0032's layout: one shard per cube on its leader PE, every cube a
/// data-parallel replica (`DPPolicy::cube_replicas`), so collectives run
/// over every cube of every member (the ccl.yaml `adr0032` entries').
fn cube_replicas(t: &Tensor, cubes: u32, pes: u32) -> Result<(), String> {
    if !t.policy.replicas {
        return Err(format!(
            "the tensor of rank {} has {}, but validator cube_replicas (ADR-0032's layout: every cube a data-parallel replica, reduced over ranks x cubes) expects replicas: create it with DPPolicy::cube_replicas({cubes}), or use a ccl entry without this validator to run the collective shard by shard",
            t.rank,
            t.policy.describe()
        ));
    }
    expect_layout(t, &leader_only(cubes, pes), "validator cube_replicas")
}

/// What a lane-wise collective needs of a tensor: every shard the same
/// size, since each lane (shard position) runs the same job.
pub fn lanes(t: &Tensor) -> Result<(), String> {
    let sizes: Vec<u64> = t.shards.iter().map(|s| s.nbytes).collect();
    if sizes.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!(
            "the {}x{} tensor of rank {} ({}) has shards of {sizes:?} B; a collective runs shard by shard (one lane per shard position, every lane the same size): split each level into parts that divide its rows or columns evenly",
            t.shape.0,
            t.shape.1,
            t.rank,
            t.policy.describe()
        ));
    }
    Ok(())
}

/// Exactly one shard per rank (SIPs of one cube).
fn single_shard_per_rank(t: &Tensor, _cubes: u32, _pes: u32) -> Result<(), String> {
    let want = t
        .shards
        .first()
        .map(|s| vec![(s.cube, s.pe)])
        .unwrap_or_default();
    if t.shards.len() != 1 {
        return Err(format!(
            "the tensor of rank {} has {} shards; validator single_shard_per_rank expects exactly one",
            t.rank,
            t.shards.len()
        ));
    }
    expect_layout(t, &want, "validator single_shard_per_rank")
}

/// One shard on every PE of every cube.
fn multi_pe_sip_local(t: &Tensor, cubes: u32, pes: u32) -> Result<(), String> {
    expect_layout(t, &all_pes(cubes, pes), "validator multi_pe_sip_local")
}

#[cfg(test)]
mod tests {
    use super::super::tensor::{DPPolicy, place};
    use super::*;
    use kernbench_systems::program::Space;

    fn tensor(shape: (usize, usize), p: DPPolicy) -> Tensor {
        Tensor {
            rank: 1,
            shape,
            dtype: kernbench_systems::DType::F16,
            policy: p,
            space: Space::Hbm,
            shards: place((shape, kernbench_systems::DType::F16), &p, 1, 4, 2).unwrap(),
        }
    }

    #[test]
    fn mappers_give_leaders_or_every_pe() {
        assert_eq!(mapper("leader_only").unwrap()(2, 3), vec![(0, 0), (1, 0)]);
        assert_eq!(
            mapper("all_pes").unwrap()(2, 2),
            vec![(0, 0), (0, 1), (1, 0), (1, 1)]
        );
        assert_eq!(
            mapper("nearest").unwrap_err(),
            "unknown mapper 'nearest'; allowed: leader_only, all_pes"
        );
        assert!(
            validator("x")
                .unwrap_err()
                .contains("cube_leaders, cube_replicas, single_shard_per_rank")
        );
    }

    #[test]
    fn validators_accept_their_layout_and_name_the_difference() {
        let leaders = tensor((4, 8), DPPolicy::cube_rows(4));
        cube_leaders(&leaders, 4, 2).unwrap();
        let e = multi_pe_sip_local(&leaders, 4, 2).unwrap_err();
        assert!(e.starts_with("the tensor of rank 1 (DPPolicy { cube: row_wise, pe: replicate, num_cubes: 4, num_pes: 1, replicas: false }) has shards on (cube, pe) [(0, 0), (1, 0), (2, 0), (3, 0)], but validator multi_pe_sip_local expects [(0, 0), (0, 1)"), "{e}");
        multi_pe_sip_local(&tensor((8, 8), DPPolicy::pe_rows(4, 2)), 4, 2).unwrap();
        let e = cube_leaders(&tensor((5, 8), DPPolicy::cube_rows(4)), 4, 2).unwrap_err();
        assert!(e.contains("unequal sizes [32, 16, 16, 16] B"), "{e}");
        single_shard_per_rank(&tensor((1, 8), DPPolicy::cube_rows(1)), 4, 2).unwrap();
        assert!(
            single_shard_per_rank(&leaders, 4, 2)
                .unwrap_err()
                .contains("has 4 shards")
        );
    }
}
