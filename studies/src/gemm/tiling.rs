//! How a GEMM is cut for the PEs: the tile shape the TCM allows, and each
//! PE's output tiles with the operand rectangles that feed them.

use super::placement::Placement;
use kernbench_dist::{Block, DistError, Split, Tensor};
use kernbench_spec::spec::SystemSpec;
use kernbench_spec::topology::address::Location;
use kernbench_systems::DType;

/// The largest output tile (m × n) and reduction depth (k) a PE works on at
/// once, and the rates that decide how the first steps ramp up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TileShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// `pe.macs_per_tick`.
    pub macs_per_tick: u64,
    /// A PE's share of its cube's HBM port: bytes per tick when every PE of
    /// the cube loads at once (`memory.hbm.bandwidth_gbps · tick_ns / PEs`).
    pub load_bytes_per_tick: f64,
}

/// Tiles of `t²` elements a square tile side `t` keeps in TCM: two operand
/// pairs (the pair the MAC array reads and the next one loading: 2 · 2t²)
/// and three results (the product being computed, the one being
/// accumulated, the accumulator: 3t²).
pub const TCM_TILES: u64 = 7;

/// Of the [`TCM_TILES`], the operand tiles (of the operands' dtype); the
/// rest are results (of the accumulation dtype).
const OPERAND_TILES: u64 = 4;

/// Tile sides are multiples of this many elements.
pub const TILE_GRAIN: u64 = 32;

impl TileShape {
    /// [`TileShape::for_dtypes`] of f16 operands accumulated in f16.
    pub fn of(spec: &SystemSpec, tcm_bytes: u64) -> Result<TileShape, String> {
        Self::for_dtypes(spec, tcm_bytes, (DType::F16, DType::F16))
    }

    /// The largest square tile whose working set (`TCM_TILES · t²`
    /// elements: the operand tiles of `operand`, the result tiles of `acc`)
    /// fits `tcm_bytes` (the TCM left free by IPCQ slot areas and tensors),
    /// rounded down to a multiple of `TILE_GRAIN`.
    pub fn for_dtypes(
        spec: &SystemSpec,
        tcm_bytes: u64,
        (operand, acc): (DType, DType),
    ) -> Result<TileShape, String> {
        let per_t2 = OPERAND_TILES * operand.bytes() + (TCM_TILES - OPERAND_TILES) * acc.bytes();
        let t = ((tcm_bytes / per_t2) as f64).sqrt().floor() as u64;
        let t = t / TILE_GRAIN * TILE_GRAIN;
        if t == 0 {
            return Err(format!(
                "a GEMM of {operand} operands accumulated in {acc} needs {} bytes of free TCM per PE for {TILE_GRAIN}x{TILE_GRAIN} tiles, and {tcm_bytes} B are free (memory.tcm.size_bytes is {}); allowed: a larger memory.tcm.size_bytes, or IPCQ slots outside TCM (ccl buffer_kind sram or hbm)",
                per_t2 * TILE_GRAIN * TILE_GRAIN,
                spec.memory.tcm.size_bytes
            ));
        }
        let t = t as usize;
        let pes = u64::from(spec.cube.pe_layout.pe_per_corner * spec.cube.pe_layout.corners);
        let hbm = &spec.memory.hbm;
        let load_bytes_per_tick = if hbm.ideal {
            f64::INFINITY
        } else {
            hbm.bandwidth_gbps * spec.system.tick_ns / pes as f64
        };
        Ok(TileShape {
            m: t,
            n: t,
            k: t,
            macs_per_tick: spec.pe.macs_per_tick,
            load_bytes_per_tick,
        })
    }

    /// How much deeper each of a tile's first steps can be than the one
    /// before while its operands still load during that step's multiply:
    /// MAC ticks per unit of k over load ticks per unit of k (at most 2).
    fn ramp(&self, m: usize, n: usize, operand: DType) -> f64 {
        let mac = (m as u64 * n as u64 * operand.mac_passes()) as f64 / self.macs_per_tick as f64;
        let load = ((m + n) as u64 * operand.bytes()) as f64 / self.load_bytes_per_tick;
        (mac / load).min(2.0)
    }
}

/// A tile's reduction steps, shallow first then deeper by `ratio` each
/// until `max`, so the MAC array starts after a small load instead of a
/// full tile's and each step's operands load during the step before; the
/// steps still break at every cut of `ks`.
fn ramp_up(ks: &[(usize, usize)], ratio: f64, max: usize) -> Vec<(usize, usize)> {
    if ratio <= 1.05 {
        return ks.to_vec();
    }
    let mut out = Vec::new();
    let mut step = TILE_GRAIN as f64;
    for &(k0, len) in ks {
        let (mut at, end) = (k0, k0 + len);
        while at < end && step < max as f64 {
            let k = (step as usize).clamp(1, end - at);
            out.push((at, k));
            at += k;
            step *= ratio;
        }
        if at < end {
            out.extend(intervals(at, end, &[], max));
        }
    }
    out
}

/// A rectangle of a tensor shard in memory: one transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRect {
    pub at: Location,
    pub rows: usize,
    pub cols: usize,
    /// Elements from one row's start to the next (the shard's width).
    pub pitch: usize,
    /// Loaded as its transpose: `rows` × `cols` are as stored, the tile
    /// lands `cols` × `rows`.
    pub transposed: bool,
}

/// One reduction step of an output tile: `a` (m × k) times `b` (k × n).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub a: ShardRect,
    pub b: ShardRect,
    pub k: usize,
}

/// An output tile of a PE: where it goes and the steps that sum into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutTile {
    pub c: ShardRect,
    pub steps: Vec<Step>,
}

/// `[lo, hi)` cut at every boundary in `cuts`, then into near-equal pieces of at most `max`.
fn intervals(lo: usize, hi: usize, cuts: &[usize], max: usize) -> Vec<(usize, usize)> {
    let mut points: Vec<usize> = cuts.iter().copied().filter(|&c| lo < c && c < hi).collect();
    points.extend([lo, hi]);
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    for w in points.windows(2) {
        let len = w[1] - w[0];
        let parts = len.div_ceil(max.max(1));
        let (q, r) = (len / parts, len % parts);
        let mut at = w[0];
        for i in 0..parts {
            let n = q + usize::from(i < r);
            out.push((at, n));
            at += n;
        }
    }
    out
}

/// A GEMM operand: a tensor read as itself, or as its transpose (each
/// tile a transposing load of the stored rectangle, for Xᵀ·dY and dY·Wᵀ).
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a> {
    pub t: &'a Tensor,
    pub transposed: bool,
}

impl<'a> Operand<'a> {
    /// The tensor as stored.
    pub fn plain(t: &'a Tensor) -> Self {
        Operand {
            t,
            transposed: false,
        }
    }

    /// The tensor read as its transpose.
    pub fn transposed(t: &'a Tensor) -> Self {
        Operand {
            t,
            transposed: true,
        }
    }

    /// The shape the GEMM sees.
    pub fn shape(&self) -> (usize, usize) {
        let (r, c) = self.t.shape;
        if self.transposed { (c, r) } else { (r, c) }
    }

    /// Row and column boundaries of the shards, as the GEMM sees them.
    fn boundaries(&self) -> (Vec<usize>, Vec<usize>) {
        let (rows, cols) = boundaries(self.t);
        if self.transposed {
            (cols, rows)
        } else {
            (rows, cols)
        }
    }

    /// The (first, count) of the GEMM-side columns a shard holds.
    fn cols_of(&self, s: &kernbench_dist::Shard) -> (usize, usize) {
        if self.transposed {
            s.block.rows
        } else {
            s.block.cols
        }
    }
}

/// Row and column boundaries of a tensor's shards.
fn boundaries(t: &Tensor) -> (Vec<usize>, Vec<usize>) {
    let rows = t
        .shards
        .iter()
        .flat_map(|s| [s.block.rows.0, s.block.rows.0 + s.block.rows.1]);
    let cols = t
        .shards
        .iter()
        .flat_map(|s| [s.block.cols.0, s.block.cols.0 + s.block.cols.1]);
    (rows.collect(), cols.collect())
}

/// A PE of a GEMM: the block of C it computes and the reduction range it
/// sums over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worker {
    pub cube: u32,
    pub pe: u32,
    pub block: Block,
    /// (first, count) of k: all of it, or under split-K the cube's part.
    pub k: (usize, usize),
}

/// Who computes C = A · B: one PE per shard of C, except that a cube
/// holding its block of C as one shard in HBM or SRAM (`num_pes == 1`)
/// shares it among the PEs `placement` names (by default its first
/// `pes_per_cube`), cut along its longer side; with a `sizing`, only as many
/// of them as [`sharers`] finds fastest. When C is replicated over
/// cubes (split-K), each cube sums over its own part of k (A's columns
/// there), so its copy of C is a partial product. Err: a placement on
/// chosen PEs for a C split over PEs (each shard has its PE).
pub fn workers(
    a: Operand,
    c: &Tensor,
    pes_per_cube: u32,
    placement: &Placement,
    sizing: Option<&TileShape>,
) -> Result<Vec<Worker>, DistError> {
    placement.check(pes_per_cube)?;
    let split_k = c.policy.cube == Split::Replicate && c.policy.num_cubes > 1;
    let k_of = |cube: u32| {
        if !split_k {
            return (0, a.shape().1);
        }
        let on = a.t.shards.iter().filter(|s| s.cube == cube);
        let lo = on.clone().map(|s| a.cols_of(s).0).min().unwrap_or(0);
        let hi = on
            .map(|s| {
                let (c0, n) = a.cols_of(s);
                c0 + n
            })
            .max()
            .unwrap_or(0);
        (lo, hi - lo)
    };
    let shared = c.policy.num_pes == 1 && c.space != kernbench_spec::topology::address::Space::Tcm;
    if !shared && *placement != Placement::Owners {
        return Err(DistError::Config(format!(
            "matmul placed on {placement:?}: C ({}x{}, {} over {} PEs in {}) has a shard per PE, which that PE computes; allowed: Placement::Owners, or C with one shard per cube (num_pes 1) in HBM or SRAM, which the placed PEs share",
            c.shape.0,
            c.shape.1,
            c.policy.pe.name(),
            c.policy.num_pes,
            c.space.name()
        )));
    }
    let mut out = Vec::new();
    for s in &c.shards {
        let k = k_of(s.cube);
        if !shared {
            out.push(Worker {
                cube: s.cube,
                pe: s.pe,
                block: s.block,
                k,
            });
            continue;
        }
        let (split, len) = if s.block.rows.1 >= s.block.cols.1 {
            (Split::RowWise, s.block.rows.1)
        } else {
            (Split::ColumnWise, s.block.cols.1)
        };
        let mut pes = placement.sharing(len, pes_per_cube);
        if let Some(tile) = sizing {
            let cube_rate = tile.load_bytes_per_tick * f64::from(pes_per_cube);
            let shape = (s.block, split, k.1);
            pes.truncate(sharers(shape, pes.len(), (tile, cube_rate), a.t.dtype));
        }
        let blocks = s.block.split(split, pes.len() as u32);
        for (pe, block) in pes.into_iter().zip(blocks) {
            out.push(Worker {
                cube: s.cube,
                pe,
                block,
                k,
            });
        }
    }
    Ok(out)
}

/// How many of `most` PEs share a cube's `block` of C (cut along `split`,
/// summed over `k`): the count with the least estimated ticks, the fewest
/// on a tie. For `p` PEs: the slowest one's MAC ticks against the ticks
/// the cube's memory (`cube_rate` bytes a tick) takes for the operand
/// bytes all of them load. A PE loads its A rows once per tile column and
/// its B columns once per tile row, so the operand along the unsplit side
/// is read by every PE: on a skinny block, more PEs cost more loads than
/// they save MAC ticks.
fn sharers(
    (block, split, k): (Block, Split, usize),
    most: usize,
    (tile, cube_rate): (&TileShape, f64),
    dtype: DType,
) -> usize {
    let ticks = |p: usize| {
        let (mut mac, mut bytes) = (0u64, 0u64);
        for b in block.split(split, p as u32) {
            let (r, c) = (b.rows.1 as u64, b.cols.1 as u64);
            mac = mac.max((r * c * k as u64 * dtype.mac_passes()).div_ceil(tile.macs_per_tick));
            let loads = r * c.div_ceil(tile.n as u64) + c * r.div_ceil(tile.m as u64);
            bytes += k as u64 * loads * dtype.bytes();
        }
        (mac as f64).max(bytes as f64 / cube_rate)
    };
    let times: Vec<f64> = (1..=most).map(ticks).collect();
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    1 + times
        .iter()
        .position(|&t| t <= best * (1.0 + 1e-9))
        .unwrap_or(most - 1)
}

/// The rectangle of operand `o` at (row, col) of `rows` × `cols` as the
/// GEMM sees it: the stored rectangle, flagged to load transposed when `o` is.
fn operand_rect(
    o: Operand,
    w: &Worker,
    (row, col): (usize, usize),
    rows: usize,
    cols: usize,
) -> ShardRect {
    if !o.transposed {
        return rect(o.t, w, (row, col), rows, cols);
    }
    ShardRect {
        transposed: true,
        ..rect(o.t, w, (col, row), cols, rows)
    }
}

/// The rectangle of `t` at (row, col) of `rows` × `cols`, read from a shard
/// that holds it, preferring one on the worker's own cube (and PE).
fn rect(t: &Tensor, w: &Worker, (row, col): (usize, usize), rows: usize, cols: usize) -> ShardRect {
    let holds = |s: &&kernbench_dist::Shard| {
        let ((r0, rn), (c0, cn)) = (s.block.rows, s.block.cols);
        r0 <= row && row + rows <= r0 + rn && c0 <= col && col + cols <= c0 + cn
    };
    let s = t
        .shards
        .iter()
        .filter(holds)
        .min_by_key(|s| (s.cube != w.cube, s.pe != w.pe))
        .expect("cut at every shard boundary, so a shard holds every rectangle");
    let pitch = s.pitch;
    let offset = ((row - s.block.rows.0) * pitch + (col - s.block.cols.0)) as u64 * t.dtype.bytes();
    ShardRect {
        at: Location {
            space: t.space,
            sip: s.sip,
            cube: s.cube,
            pe: if t.space == kernbench_spec::topology::address::Space::Tcm {
                s.pe
            } else {
                0
            },
            offset: s.addr + offset,
        },
        rows,
        cols,
        pitch,
        transposed: false,
    }
}

/// The output tiles of worker `w`, for C = A · B, in row-major tile order;
/// each tile's steps run over the worker's k in order. Tiles never straddle
/// a shard of A, B or C, so every rectangle is one transfer.
pub fn plan(a: Operand, b: Operand, c: &Tensor, w: &Worker, t: TileShape) -> Vec<OutTile> {
    let (a_rows, a_cols) = a.boundaries();
    let (b_rows, b_cols) = b.boundaries();
    let k_cuts: Vec<usize> = a_cols.into_iter().chain(b_rows).collect();
    let (r0, rn) = w.block.rows;
    let (c0, cn) = w.block.cols;
    let ks = intervals(w.k.0, w.k.0 + w.k.1, &k_cuts, t.k);
    let mut tiles = Vec::new();
    for (row, m) in intervals(r0, r0 + rn, &a_rows, t.m) {
        for (col, n) in intervals(c0, c0 + cn, &b_cols, t.n) {
            // Only a PE's first tile waits for its operands; later ones load
            // during the tile before.
            let ramped;
            let ks = if tiles.is_empty() {
                ramped = ramp_up(&ks, t.ramp(m, n, a.t.dtype), t.k);
                &ramped
            } else {
                &ks
            };
            let steps = ks
                .iter()
                .map(|&(k0, k)| Step {
                    a: operand_rect(a, w, (row, k0), m, k),
                    b: operand_rect(b, w, (k0, col), k, n),
                    k,
                })
                .collect();
            tiles.push(OutTile {
                c: rect(c, w, (row, col), m, n),
                steps,
            });
        }
    }
    tiles
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_cut_at_boundaries_then_evenly() {
        assert_eq!(intervals(0, 10, &[], 4), vec![(0, 4), (4, 3), (7, 3)]);
        assert_eq!(intervals(2, 10, &[0, 5, 10, 12], 8), vec![(2, 3), (5, 5)]);
    }

    /// A 128 × 128 block over k = 4096 (f16, 448-wide tiles, 1024 MACs a
    /// tick, 256 B a tick into the cube): p PEs of 128/p rows take
    /// 512·⌈128/p⌉ MAC ticks and load A once and B p times, 4096·(1 + p)
    /// ticks; p = 4 is the fastest (max(16384, 20480)), p = 8 would take
    /// 36864. Unlimited loads give every PE; a block as tall as the PEs
    /// are many, all of them.
    #[test]
    fn sharers_are_as_many_as_the_cube_memory_feeds() {
        let spec = kernbench_spec::spec::System::embedded_default().spec;
        let t = TileShape::for_dtypes(&spec, 4 << 20, (DType::F16, DType::F32)).unwrap();
        assert_eq!((t.m, t.macs_per_tick), (448, 1024));
        let block = Block {
            rows: (0, 128),
            cols: (0, 128),
        };
        let skinny = (block, Split::RowWise, 4096);
        assert_eq!(sharers(skinny, 8, (&t, 256.0), DType::F16), 4);
        assert_eq!(sharers(skinny, 8, (&t, f64::INFINITY), DType::F16), 8);
        assert_eq!(sharers(skinny, 3, (&t, 256.0), DType::F16), 3);
        let tall = Block {
            rows: (0, 4096),
            cols: (0, 4096),
        };
        assert_eq!(
            sharers((tall, Split::RowWise, 4096), 8, (&t, 256.0), DType::F16),
            8
        );
    }

    #[test]
    fn a_free_4_mib_tcm_gives_544_wide_tiles() {
        // 4 MiB / (2 B · 7) = 299593 elements: side 547, down to a multiple of 32.
        let spec = kernbench_spec::spec::System::embedded_default().spec;
        let t = TileShape::of(&spec, 4 << 20).unwrap();
        assert_eq!((t.m, t.n, t.k), (544, 544, 544));
        // 256 GB/s over 8 PEs: 32 B per tick each.
        assert_eq!(t.load_bytes_per_tick, 32.0);
        let e = TileShape::of(&spec, 1000).unwrap_err();
        assert!(
            e.contains("14336 bytes of free TCM") && e.contains("memory.tcm.size_bytes"),
            "{e}"
        );
    }

    #[test]
    fn the_first_steps_ramp_up_by_the_mac_to_load_ratio() {
        assert_eq!(
            ramp_up(&[(0, 512), (512, 512)], 2.0, 512),
            vec![
                (0, 32),
                (32, 64),
                (96, 128),
                (224, 256),
                (480, 32),
                (512, 512)
            ]
        );
        assert_eq!(ramp_up(&[(0, 512)], 1.0, 512), vec![(0, 512)]);
        // The ramp carries over a cut: 32 + 64 + 128 = 224, then 200 − 224 < 0.
        assert_eq!(
            ramp_up(&[(0, 100), (100, 100)], 2.0, 512),
            vec![(0, 32), (32, 64), (96, 4), (100, 100)]
        );
    }
}
