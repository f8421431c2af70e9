//! Tensors of a rank and how they lie across its SIP: a [`DPPolicy`] splits a
//! row-major matrix (f16 unless created with another [`DType`]) over cubes, then each cube's part over PEs; every piece
//! is a [`Shard`] with structural coordinates (sip, cube, pe) and its place in
//! the tensor, stored contiguously in its cube's memory.

use kernbench_systems::DType;
use kernbench_systems::program::Space;
use serde::{Deserialize, Serialize};

/// How one level (cubes, or the PEs of a cube) divides what it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Contiguous blocks of rows, the first `rows % parts` one row longer.
    RowWise,
    /// Contiguous blocks of columns, the first `cols % parts` one longer.
    ColumnWise,
    /// Every part holds all of it.
    Replicate,
}

impl Split {
    pub fn name(self) -> &'static str {
        ["row_wise", "column_wise", "replicate"][self as usize]
    }
}

/// The data-parallel placement of a tensor inside one SIP: over the first
/// `num_cubes` cubes, then over the first `num_pes` PEs of each cube.
///
/// What a collective on the tensor means follows from `replicas`: without
/// it (the default, torch.distributed's meaning) a collective acts on the
/// rank's logical tensor element-wise over the group's ranks, shard by
/// shard: the shard at (cube c, pe p) meets the shard at (c, p) of the
/// other ranks, one collective per shard position ("lane"), all lanes at
/// once on the SIP links. A replicated level is no exception: each copy is
/// a lane and every copy gets the same answer. With `replicas`, every
/// shard is a data-parallel replica of its own (ADR-0032's layout: every
/// cube a replica): the collective runs over every shard of every member,
/// as if each were a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DPPolicy {
    pub cube: Split,
    pub pe: Split,
    pub num_cubes: u32,
    pub num_pes: u32,
    /// Every shard is a replica of its own: collectives run over all the
    /// shards of all member ranks (the replica reduction), not lane-wise.
    #[serde(default)]
    pub replicas: bool,
}

impl DPPolicy {
    /// One row block per cube, held by its leader PE (a tensor of shape
    /// (cubes, n) gives each cube leader a vector of n); collectives run
    /// lane-wise: cube c's rows meet cube c's rows of the other ranks.
    pub fn cube_rows(num_cubes: u32) -> Self {
        Self {
            cube: Split::RowWise,
            pe: Split::Replicate,
            num_cubes,
            num_pes: 1,
            replicas: false,
        }
    }

    /// ADR-0032's per-cube replica layout: [`DPPolicy::cube_rows`] with
    /// every cube a data-parallel replica, so a collective runs over every
    /// cube leader of every member rank (an all-reduce sums over ranks x
    /// cubes). The layout of the `leader_only` mapper and of validator
    /// `cube_replicas`.
    pub fn cube_replicas(num_cubes: u32) -> Self {
        Self::cube_rows(num_cubes).as_replicas()
    }

    /// One row block per PE of every cube: the `all_pes` mapper's layout.
    pub fn pe_rows(num_cubes: u32, num_pes: u32) -> Self {
        Self {
            cube: Split::RowWise,
            pe: Split::RowWise,
            num_cubes,
            num_pes,
            replicas: false,
        }
    }

    /// The same placement with every shard a replica (see
    /// [`DPPolicy::replicas`]).
    pub fn as_replicas(self) -> Self {
        Self {
            replicas: true,
            ..self
        }
    }

    /// The policy as code would spell it, for messages.
    pub fn describe(&self) -> String {
        format!(
            "DPPolicy {{ cube: {}, pe: {}, num_cubes: {}, num_pes: {}, replicas: {} }}",
            self.cube.name(),
            self.pe.name(),
            self.num_cubes,
            self.num_pes,
            self.replicas
        )
    }
}

/// A block of rows and columns: (first, count) of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub rows: (usize, usize),
    pub cols: (usize, usize),
}

impl Block {
    pub fn elems(&self) -> usize {
        self.rows.1 * self.cols.1
    }

    /// `parts` blocks of this one, cut as `split` says.
    pub fn split(&self, split: Split, parts: u32) -> Vec<Block> {
        let parts = parts as usize;
        let cut = |(first, len): (usize, usize)| {
            let (q, r) = (len / parts, len % parts);
            let mut at = first;
            (0..parts)
                .map(|i| {
                    let n = q + usize::from(i < r);
                    at += n;
                    (at - n, n)
                })
                .collect::<Vec<_>>()
        };
        match split {
            Split::RowWise => cut(self.rows)
                .into_iter()
                .map(|rows| Block { rows, ..*self })
                .collect(),
            Split::ColumnWise => cut(self.cols)
                .into_iter()
                .map(|cols| Block { cols, ..*self })
                .collect(),
            Split::Replicate => vec![*self; parts],
        }
    }
}

/// One piece of a tensor: where it lives and which part of the tensor it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub sip: u32,
    pub cube: u32,
    pub pe: u32,
    /// Byte offset of its first element in the row-major tensor.
    pub offset_bytes: u64,
    pub nbytes: u64,
    pub block: Block,
    /// Where its elements start in the cube's memory (`Tensor::space`).
    pub addr: u64,
    /// Elements from the start of one of its rows in memory to the next:
    /// its block's width, or for a view of some columns of a wider tensor,
    /// that tensor's. GEMM operands and outputs may be such views; every
    /// other kernel takes shards whose rows are contiguous.
    pub pitch: usize,
}

/// A rank's tensor: row-major, `shape = (rows, cols)`, elements of `dtype`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub rank: u32,
    pub shape: (usize, usize),
    /// Its element type (f16 unless created with `Rank::empty_typed`).
    pub dtype: DType,
    pub policy: DPPolicy,
    /// The memory its shards live in (HBM unless chosen).
    pub space: Space,
    /// Ordered by (cube, pe, offset_bytes).
    pub shards: Vec<Shard>,
}

impl Tensor {
    /// The tensor without its rank, SIP and addresses: what a kernel's
    /// timing depends on ([`crate::Rank::launch_shaped`]).
    pub fn timing_view(&self) -> Tensor {
        let mut t = self.clone();
        t.rank = 0;
        for s in &mut t.shards {
            (s.sip, s.addr) = (0, 0);
        }
        t
    }

    pub fn elems(&self) -> usize {
        self.shape.0 * self.shape.1
    }

    /// Its size in bytes: elements × the dtype's bytes.
    pub fn nbytes(&self) -> u64 {
        self.elems() as u64 * self.dtype.bytes()
    }

    /// Ok for an f16 tensor; otherwise why `what` (a collective or a
    /// transfer, whose kernels move f16 buffers) refuses it, and the fix.
    pub fn check_f16(&self, what: &str) -> Result<(), String> {
        if self.dtype == DType::F16 {
            return Ok(());
        }
        Err(format!(
            "{what} of rank {}'s {}x{} {} tensor: collectives and transfers move f16 data only; allowed: an f16 tensor; cast it first into an f16 tensor of the same layout (ops::cast_into, or tl.cast in a kernel) and pass that",
            self.rank, self.shape.0, self.shape.1, self.dtype
        ))
    }

    /// The same memory read as replicas by collectives (see
    /// [`DPPolicy::replicas`]): e.g. per-cube partial sums that an
    /// all-reduce must add over cubes and ranks.
    pub fn as_replicas(&self) -> Tensor {
        Tensor {
            policy: self.policy.as_replicas(),
            ..self.clone()
        }
    }
}

/// The shards of a `shape` tensor of `dtype` on `sip` under `policy`, in
/// (cube, pe, offset) order, before they are given addresses. Err names the field.
pub fn place(
    (shape, dtype): ((usize, usize), DType),
    policy: &DPPolicy,
    sip: u32,
    cubes_per_sip: u32,
    pes_per_cube: u32,
) -> Result<Vec<Shard>, String> {
    if policy.num_cubes == 0 || policy.num_cubes > cubes_per_sip {
        return Err(format!(
            "DPPolicy.num_cubes is {}; allowed: 1 to {cubes_per_sip} (the cubes of a SIP)",
            policy.num_cubes
        ));
    }
    if policy.num_pes == 0 || policy.num_pes > pes_per_cube {
        return Err(format!(
            "DPPolicy.num_pes is {}; allowed: 1 to {pes_per_cube} (the PEs of a cube)",
            policy.num_pes
        ));
    }
    if shape.0 == 0 || shape.1 == 0 {
        return Err(format!(
            "tensor shape {shape:?} is empty; allowed: at least one row and one column"
        ));
    }
    let whole = Block {
        rows: (0, shape.0),
        cols: (0, shape.1),
    };
    let mut shards = Vec::new();
    for (cube, part) in whole
        .split(policy.cube, policy.num_cubes)
        .into_iter()
        .enumerate()
    {
        for (pe, block) in part
            .split(policy.pe, policy.num_pes)
            .into_iter()
            .enumerate()
        {
            if block.elems() == 0 {
                return Err(format!(
                    "a {}x{} tensor split {} over {} cubes and {} over {} PEs leaves cube {cube} pe {pe} empty; allowed: at least as many rows (columns) as the parts they are split into",
                    shape.0,
                    shape.1,
                    policy.cube.name(),
                    policy.num_cubes,
                    policy.pe.name(),
                    policy.num_pes
                ));
            }
            shards.push(Shard {
                sip,
                cube: cube as u32,
                pe: pe as u32,
                offset_bytes: (block.rows.0 * shape.1 + block.cols.0) as u64 * dtype.bytes(),
                nbytes: block.elems() as u64 * dtype.bytes(),
                block,
                addr: 0,
                pitch: block.cols.1,
            });
        }
    }
    Ok(shards)
}

/// A shard's elements, gathered from a row-major tensor's data.
pub fn gather<T: Copy>(data: &[T], cols: usize, b: &Block) -> Vec<T> {
    (b.rows.0..b.rows.0 + b.rows.1)
        .flat_map(|r| {
            data[r * cols + b.cols.0..r * cols + b.cols.0 + b.cols.1]
                .iter()
                .copied()
        })
        .collect()
}

/// Writes a shard's elements back into a row-major tensor's data.
pub fn scatter<T: Copy>(data: &mut [T], cols: usize, b: &Block, shard: &[T]) {
    for (i, r) in (b.rows.0..b.rows.0 + b.rows.1).enumerate() {
        data[r * cols + b.cols.0..r * cols + b.cols.0 + b.cols.1]
            .copy_from_slice(&shard[i * b.cols.1..(i + 1) * b.cols.1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_follow_the_policy_in_cube_pe_offset_order() {
        let p = DPPolicy {
            cube: Split::RowWise,
            pe: Split::ColumnWise,
            num_cubes: 2,
            num_pes: 3,
            replicas: false,
        };
        let s = place(((5, 7), DType::F16), &p, 3, 4, 8).unwrap();
        assert_eq!(s.len(), 6);
        // Cube 0 has rows 0..3, cube 1 rows 3..5; columns 3, 2, 2 per PE.
        let got: Vec<_> = s
            .iter()
            .map(|s| (s.sip, s.cube, s.pe, s.offset_bytes, s.nbytes))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, 0, 0, 0, 18),
                (3, 0, 1, 6, 12),
                (3, 0, 2, 10, 12),
                (3, 1, 0, 42, 12),
                (3, 1, 1, 48, 8),
                (3, 1, 2, 52, 8),
            ]
        );
        let data: Vec<half::f16> = (0..35).map(|i| half::f16::from_f32(i as f32)).collect();
        let mut back = vec![half::f16::ZERO; 35];
        for sh in &s {
            scatter(&mut back, 7, &sh.block, &gather(&data, 7, &sh.block));
        }
        assert_eq!(back, data);
    }

    #[test]
    fn bad_policies_name_the_field() {
        let mut p = DPPolicy::cube_rows(17);
        let e = place(((16, 4), DType::F16), &p, 0, 16, 8).unwrap_err();
        assert!(
            e.starts_with("DPPolicy.num_cubes is 17; allowed: 1 to 16"),
            "{e}"
        );
        p.num_cubes = 4;
        let e = place(((3, 4), DType::F16), &p, 0, 16, 8).unwrap_err();
        assert!(e.contains("leaves cube 3 pe 0 empty"), "{e}");
    }
}
