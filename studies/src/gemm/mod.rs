//! GEMM on the PEs: C = A · B for tensors of one rank (A and B of one
//! dtype, C of any; K-step partials summed in f32 unless
//! [`Accumulate::F16`] is asked for), computed by the
//! PEs that hold C's shards (one PE per shard), each streaming tiles of A
//! and B from wherever their shards live, by 2-D transfers, into TCM,
//! double-buffered so loads overlap the MAC array.
//!
//! Files: `tiling` (tile shape from the TCM, each PE's tiles), `kernel`
//! (the op order that overlaps loads and MACs), `roofline` (the lower
//! bound), `sweep` (`kernbench gemm-sweep`: the grid, CSV and figures).
//!
//! ```
//! use kernbench_ccl::CclConfig;
//! use kernbench_dist::init_process_group;
//! use kernbench_studies::gemm::{Layout, matmul};
//! use kernbench_spec::spec::System;
//! use kernbench_systems::memory::DataMode;
//!
//! let sys = System::embedded_default();
//! let mut pg = init_process_group(&sys, &CclConfig::embedded_default(), "ring", DataMode::TimingOnly).unwrap();
//! let n = pg.world_size;
//! pg.spawn(n, |ctx| {
//!     let l = Layout::spread(1024, 1024, sys.cubes_per_sip(), sys.pes_per_cube());
//!     let a = ctx.empty((1024, 1024), l.a)?;
//!     let b = ctx.empty((1024, 1024), l.b)?;
//!     let c = ctx.empty((1024, 1024), l.c)?;
//!     let work = matmul(ctx, &a, &b, &c)?;
//!     let ran = ctx.wait(&work)?;
//!     assert!(ran.ticks() > 0);
//!     Ok(())
//! })
//! .unwrap();
//! ```

mod kernel;
mod placement;
mod roofline;
pub mod sweep;
mod tiling;

pub use kernel::{Accumulate, GemmArgs, gemm_kernel};
pub use placement::Placement;
pub use roofline::{Roofline, roofline};
pub use tiling::{
    Operand, OutTile, ShardRect, Step, TCM_TILES, TILE_GRAIN, TileShape, Worker, plan, workers,
};

use kernbench_dist::{DPPolicy, DistError, Rank, Split, Tensor, Work};

/// Checks that C = A · B is well formed on one SIP, with one shard of C per PE.
pub fn check(a: &Tensor, b: &Tensor, c: &Tensor) -> Result<(), DistError> {
    check_operands(Operand::plain(a), Operand::plain(b), c)
}

/// A split of a tensor as its transpose sees it.
fn seen(split: Split, transposed: bool) -> Split {
    match (split, transposed) {
        (Split::RowWise, true) => Split::ColumnWise,
        (Split::ColumnWise, true) => Split::RowWise,
        (s, _) => s,
    }
}

/// [`check`] for operands that may be read transposed.
pub fn check_operands(a: Operand, b: Operand, c: &Tensor) -> Result<(), DistError> {
    let bad = |m: String| Err(DistError::Config(m));
    let (sa, sb) = (a.shape(), b.shape());
    if a.t.dtype != b.t.dtype {
        return bad(format!(
            "matmul of A {sa:?} {} and B {sb:?} {}: the MAC array takes operands of one dtype; allowed: A and B both f16, both bf16 or both f32 (cast one first with tl.cast)",
            a.t.dtype, b.t.dtype
        ));
    }
    if sa.1 != sb.0 || c.shape != (sa.0, sb.1) {
        return bad(format!(
            "matmul of A {sa:?} and B {sb:?} into C {:?}: need A (m, k), B (k, n), C (m, n)",
            c.shape
        ));
    }
    let sip = c.shards[0].sip;
    if let Some(t) = [a.t, b.t, c]
        .into_iter()
        .find(|t| t.shards.iter().any(|s| s.sip != sip))
    {
        return bad(format!(
            "matmul: a tensor of shape {:?} has shards on another SIP than C's (SIP {sip}); allowed: A, B and C on one device (set_device before creating them)",
            t.shape
        ));
    }
    if c.policy.pe == Split::Replicate && c.policy.num_pes > 1 {
        return bad(format!(
            "matmul: C's DPPolicy replicates it over {} PEs of a cube; allowed: C split over PEs (row_wise or column_wise), or one shard per cube (num_pes 1), which the cube's PEs share",
            c.policy.num_pes
        ));
    }
    if c.policy.cube == Split::Replicate && c.policy.num_cubes > 1 {
        // Split-K: each cube's copy of C is its part of the sum over k.
        let n = c.policy.num_cubes;
        let (pa, pb) = (a.t.policy, b.t.policy);
        let (ca, cb) = (seen(pa.cube, a.transposed), seen(pb.cube, b.transposed));
        if ca != Split::ColumnWise || cb != Split::RowWise || pa.num_cubes != n || pb.num_cubes != n
        {
            return bad(format!(
                "matmul: C is replicated over {n} cubes, so each cube computes a partial product over its part of k (split-K); that needs A column_wise and B row_wise over the same {n} cubes, and A is {} over {}, B {} over {}",
                ca.name(),
                pa.num_cubes,
                cb.name(),
                pb.num_cubes
            ));
        }
    }
    Ok(())
}

/// Launches C = A · B on the PEs of the current device that [`workers`]
/// names (those holding C's shards, or sharing a cube's one shard) and
/// returns at once; `Rank::wait` gives when it ran. C's previous contents
/// are overwritten; when C is replicated over cubes, each cube's copy gets
/// the partial product over that cube's part of k (split-K). K-step
/// partials are summed in f32 and rounded once to C's dtype.
pub fn matmul(ctx: &mut Rank, a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Work, DistError> {
    matmul_placed(ctx, a, b, c, &Placement::Owners)
}

/// [`matmul`] computed by the PEs `placement` names in each cube holding
/// C (C one shard per cube; `Placement::Owners` is `matmul`).
pub fn matmul_placed(
    ctx: &mut Rank,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    placement: &Placement,
) -> Result<Work, DistError> {
    matmul_with(ctx, (a, b, c), placement, Accumulate::F32)
}

/// [`matmul_placed`] summing K-step partials in `accumulate`'s dtype
/// (`Accumulate::F16`: f16 accumulation, each partial rounded).
pub fn matmul_with(
    ctx: &mut Rank,
    (a, b, c): (&Tensor, &Tensor, &Tensor),
    placement: &Placement,
    accumulate: Accumulate,
) -> Result<Work, DistError> {
    let (a, b) = (Operand::plain(a), Operand::plain(b));
    launch_gemm(ctx, (a, b, c), placement, accumulate)
}

/// [`matmul_placed`] with A and B each read as itself or its transpose
/// (`Operand::transposed`: every tile a transposing load, same cost), so
/// Xᵀ·dY and dY·Wᵀ need no transposed copy.
pub fn matmul_operands(
    ctx: &mut Rank,
    a: Operand,
    b: Operand,
    c: &Tensor,
    placement: &Placement,
) -> Result<Work, DistError> {
    launch_gemm(ctx, (a, b, c), placement, Accumulate::F32)
}

/// Checks and launches the GEMM kernel. The tile shape fits operand tiles
/// of A's dtype and result tiles of the accumulation dtype into the free
/// TCM.
fn launch_gemm(
    ctx: &mut Rank,
    (a, b, c): (Operand, Operand, &Tensor),
    placement: &Placement,
    accumulate: Accumulate,
) -> Result<Work, DistError> {
    check_operands(a, b, c)?;
    let spec = ctx.system_spec();
    let per_cube = spec.cube.pe_layout.pes();
    let pes_of = |ws: &[Worker]| ws.iter().map(|w| (w.cube, w.pe)).collect::<Vec<_>>();
    let sharers = workers(a, c, per_cube, placement, None)?;
    let tcm = ctx.largest_free_tcm(&pes_of(&sharers))?;
    let dtypes = (a.t.dtype, accumulate.dtype());
    let tile = TileShape::for_dtypes(&spec, tcm, dtypes).map_err(DistError::Config)?;
    let workers = workers(a, c, per_cube, placement, Some(&tile))?;
    let pes = pes_of(&workers);
    let args = GemmArgs {
        a: a.t.clone(),
        b: b.t.clone(),
        transposed: (a.transposed, b.transposed),
        c: c.clone(),
        tile,
        workers,
        accumulate,
    };
    let shape = format!(
        "{:?}",
        (
            args.a.timing_view(),
            args.b.timing_view(),
            args.transposed,
            args.c.timing_view(),
            args.tile,
            &args.workers,
            args.accumulate
        )
    );
    ctx.launch_shaped(gemm_kernel, &args, &pes, &shape)
}

/// Where A, B and C of an m × k · k × n GEMM live on one SIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub a: DPPolicy,
    pub b: DPPolicy,
    pub c: DPPolicy,
}

impl Layout {
    /// Spreads C over as many cubes and PEs as its shape allows: the longer
    /// side of C over cubes; the operand that side cuts (A's rows or B's
    /// columns) is split the same way and the other replicated in every
    /// cube used, so each PE reads from its own cube's memory. Within a
    /// cube, PEs split the longer side of the cube's block: the operand
    /// along that side is read once, the other by every PE.
    pub fn spread(m: usize, n: usize, cubes: u32, pes: u32) -> Layout {
        let cap = |len: usize, parts: u32| parts.min(len.max(1) as u32);
        let whole = |num_cubes| DPPolicy {
            cube: Split::Replicate,
            pe: Split::Replicate,
            num_cubes,
            num_pes: 1,
            replicas: false,
        };
        let split = |cube, num_cubes| DPPolicy {
            cube,
            pe: Split::Replicate,
            num_cubes,
            num_pes: 1,
            replicas: false,
        };
        let (rows, nc) = if m >= n {
            (true, cap(m, cubes))
        } else {
            (false, cap(n, cubes))
        };
        // The cube's block of C: (rows, cols).
        let block = if rows {
            (m.div_ceil(nc as usize), n)
        } else {
            (m, n.div_ceil(nc as usize))
        };
        let (pe, np) = if block.0 > block.1 {
            (Split::RowWise, cap(block.0, pes))
        } else {
            (Split::ColumnWise, cap(block.1, pes))
        };
        let cube = if rows {
            Split::RowWise
        } else {
            Split::ColumnWise
        };
        Layout {
            a: if rows {
                split(Split::RowWise, nc)
            } else {
                whole(nc)
            },
            b: if rows {
                whole(nc)
            } else {
                split(Split::ColumnWise, nc)
            },
            c: DPPolicy {
                cube,
                pe,
                num_cubes: nc,
                num_pes: np,
                replicas: false,
            },
        }
    }
}
