//! Views of a rank's tensors without copies: rows of a tensor (one
//! sequence of a micro-batch, a sequence-parallel shard) and tensors side by
//! side (the heads of a projection). A view's shards point into the memory
//! of the tensors it views; it is never freed itself.

use kernbench_dist::{DPPolicy, Shard, Split, Tensor};

/// A view's layout: row blocks, one shard per cube it touches.
fn rows_policy(shards: &[Shard]) -> DPPolicy {
    DPPolicy {
        cube: Split::RowWise,
        pe: Split::Replicate,
        num_cubes: shards.len().max(1) as u32,
        num_pes: 1,
        replicas: false,
    }
}

/// Rows `first .. first + n` of `t`, whose shards hold whole rows.
pub fn rows(t: &Tensor, first: usize, n: usize) -> Tensor {
    let cols = t.shape.1;
    let shards: Vec<Shard> = t
        .shards
        .iter()
        .filter_map(|s| {
            let (r0, rn) = s.block.rows;
            let lo = r0.max(first);
            let hi = (r0 + rn).min(first + n);
            (lo < hi).then(|| Shard {
                offset_bytes: ((lo - first) * cols) as u64 * 2,
                nbytes: ((hi - lo) * cols) as u64 * 2,
                block: kernbench_dist::Block {
                    rows: (lo - first, hi - lo),
                    cols: (0, cols),
                },
                addr: s.addr + ((lo - r0) * cols) as u64 * 2,
                ..*s
            })
        })
        .collect();
    Tensor {
        policy: rows_policy(&shards),
        shape: (n, cols),
        shards,
        ..t.clone()
    }
}

/// Sequence-parallel rank `part` of `parts`'s rows of `full` (row blocks
/// over cubes, each divisible by `parts`): in each cube's block, the
/// `part`-th of `parts` equal runs, which is the block an in-place
/// all-gather takes from that rank and a reduce-scatter leaves it. The
/// view's rows are those runs in cube order.
pub fn sequence_shard(full: &Tensor, part: usize, parts: usize) -> Tensor {
    let cols = full.shape.1;
    let mut at = 0;
    let shards: Vec<Shard> = full
        .shards
        .iter()
        .map(|s| {
            let n = s.block.rows.1 / parts;
            let shard = Shard {
                offset_bytes: (at * cols) as u64 * 2,
                nbytes: (n * cols) as u64 * 2,
                block: kernbench_dist::Block {
                    rows: (at, n),
                    cols: (0, cols),
                },
                addr: s.addr + (part * n * cols) as u64 * 2,
                ..*s
            };
            at += n;
            shard
        })
        .collect();
    Tensor {
        policy: full.policy,
        shape: (full.shape.0 / parts, cols),
        shards,
        ..full.clone()
    }
}

/// `parts` (each of the same rows) side by side as one tensor of their
/// columns in order: a GEMM operand over several heads.
pub fn side_by_side(parts: &[Tensor]) -> Tensor {
    let mut shards = Vec::new();
    let mut at = 0;
    for p in parts {
        shards.extend(p.shards.iter().map(|s| Shard {
            block: kernbench_dist::Block {
                cols: (s.block.cols.0 + at, s.block.cols.1),
                ..s.block
            },
            ..*s
        }));
        at += p.shape.1;
    }
    Tensor {
        shape: (parts[0].shape.0, at),
        shards,
        ..parts[0].clone()
    }
}
