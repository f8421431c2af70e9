//! Views of a rank's tensors without copies: rows of a tensor (one
//! sequence of a micro-batch, a sequence-parallel shard), columns of one
//! (a head of the fused QKV projection). A view's shards point into the memory
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
    let (cols, bytes) = (t.shape.1, t.dtype.bytes());
    let shards: Vec<Shard> = t
        .shards
        .iter()
        .filter_map(|s| {
            let (r0, rn) = s.block.rows;
            let lo = r0.max(first);
            let hi = (r0 + rn).min(first + n);
            (lo < hi).then(|| Shard {
                offset_bytes: ((lo - first) * cols) as u64 * bytes,
                nbytes: ((hi - lo) * cols) as u64 * bytes,
                block: kernbench_dist::Block {
                    rows: (lo - first, hi - lo),
                    cols: (0, cols),
                },
                addr: s.addr + ((lo - r0) * s.pitch) as u64 * bytes,
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

/// Columns `first .. first + n` of `t`, whose shards hold whole rows: a
/// GEMM operand or output (one head's Q, K or V of the fused projection).
pub fn columns(t: &Tensor, first: usize, n: usize) -> Tensor {
    let bytes = t.dtype.bytes();
    let shards: Vec<Shard> = t
        .shards
        .iter()
        .map(|s| Shard {
            offset_bytes: (s.block.rows.0 * n) as u64 * bytes,
            nbytes: (s.block.rows.1 * n) as u64 * bytes,
            block: kernbench_dist::Block {
                cols: (0, n),
                ..s.block
            },
            addr: s.addr + first as u64 * bytes,
            ..*s
        })
        .collect();
    Tensor {
        shape: (t.shape.0, n),
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
