//! hier_lanes' reduce-scatter and all-gather: the reduce-scatter levels (the
//! cube ring, then each cube's own lanes along SIP rows and columns, or
//! along the snake) and the all-gather levels back, over a buffer whose
//! first level is the collective's participant blocks.
//!
//! The result must be participant p's block of `split(S, P)`; nested splits
//! of an uneven buffer do not give those blocks, so the participant level
//! comes first and a ring block of a level is a *set* of participant blocks
//! (all SIPs' blocks of one cube, all rows' blocks of one SIP column, ...):
//! one ring job per element of the set, whose ring block `k` is a participant
//! block read from a table. The tables are chosen so that what a participant
//! owns after each level is the part the next level splits, and after the
//! last level exactly its own block: no final exchange.

use super::Coords;
use crate::kernels::{Buffer, Keep, Ring, RingJob, all_gather, grid_cycle, reduce_scatter};
use crate::{Collective, Group, KernelArgs};
use kernbench_runtime::kernel::{Index, Sym, Tl};
use kernbench_spec::spec::SipTopology;
use kernbench_systems::program::QDir;
use std::sync::Arc;

/// One direction of one level's ring. Participant (key, job j) has a window of
/// `2n` entries in the shared table (ring blocks `me .. me + n` of the
/// kernels stay inside it): entry `i` is the participant block of ring
/// block `i`. `ring.me` is the participant's position plus its window's start,
/// a multiple of `n`, so every participant shares one program and the position
/// mod n is unchanged.
pub(super) struct LevelRing {
    ring: Ring,
    table: Arc<[u32]>,
}

/// A level: its ring, the number of keys (values of the coordinates a
/// participant keeps fixed) and of jobs per participant, and `digit(key, j,
/// m)`: the participant block of job `j` of a participant with `key` that
/// belongs to the participant at forward ring position `m`.
pub(super) struct Level<'a> {
    name: &'a str,
    n: usize,
    next: QDir,
    prev: QDir,
    keys: usize,
    jobs: usize,
    digit: &'a dyn Fn(usize, usize, usize) -> usize,
}

impl<'a> Level<'a> {
    /// A level of `n` participants sending on `dirs.0` and receiving on
    /// `dirs.1`, with (keys, jobs) participants' windows.
    pub(super) fn new(
        name: &'a str,
        n: usize,
        dirs: (QDir, QDir),
        (keys, jobs): (usize, usize),
        digit: &'a dyn Fn(usize, usize, usize) -> usize,
    ) -> Self {
        Level {
            name,
            n,
            next: dirs.0,
            prev: dirs.1,
            keys,
            jobs,
            digit,
        }
    }

    /// The ring `d` ways round (1: reversed) for the participant at forward
    /// position `pos` with `key`. With `shift` 1 (reduce-scatter) ring
    /// block `k` is the block of the participant at `k − 1`, since
    /// reduce-scatter leaves a participant with ring block `me + 1`; with 0
    /// (all-gather) the participant's own, which it starts from.
    pub(super) fn way(
        &self,
        tl: &mut Tl,
        pos: usize,
        key: usize,
        d: usize,
        shift: usize,
    ) -> LevelRing {
        let (n, w) = (self.n, 2 * self.n);
        let name = format!("hier_lanes {} way {d} shift {shift}", self.name);
        let table = tl.table(&name, || {
            let mut t = Vec::with_capacity(self.keys * self.jobs * w);
            for key in 0..self.keys {
                for j in 0..self.jobs {
                    for i in 0..w {
                        let at = (i + n - shift) % n;
                        let m = if d == 0 { at } else { (n - at) % n };
                        t.push((self.digit)(key, j, m) as u32);
                    }
                }
            }
            t
        });
        let me = if d == 0 { pos } else { (n - pos) % n };
        let (next, prev) = if d == 0 {
            (self.next, self.prev)
        } else {
            (self.prev, self.next)
        };
        let ring = Ring {
            n,
            me: tl.param((me + key * self.jobs * w) as i64),
            next,
            prev,
        };
        LevelRing { ring, table }
    }
}

impl LevelRing {
    /// Job `j` of this participant, on the part `suffix` of every block.
    pub(super) fn job(&self, j: usize, suffix: Vec<Index>) -> RingJob {
        let ring = Ring {
            me: self.ring.me + j * 2 * self.ring.n,
            ..self.ring
        };
        RingJob {
            ring,
            prefix: Vec::new(),
            order: Some(self.table.clone()),
            suffix,
        }
    }
}

/// This participant's rings, both ways round: the cube ring, then the lanes.
/// Half 0 of every block reduces along SIP rows first, then columns; half
/// 1 along columns first, so rows and columns run at once and every lane
/// of a cube is busy in both lane phases. The first lane ring of a half
/// holds a block of every row (columns: every column) of the grid; the
/// second only its own. On a mesh the lanes may instead run one ring
/// through every SIP ([`snake`]).
struct Rings {
    cube: [LevelRing; 2],
    rows_first: [LevelRing; 2],
    cols_first: [LevelRing; 2],
    rows_second: [LevelRing; 2],
    cols_second: [LevelRing; 2],
    snake: Option<[LevelRing; 2]>,
}

/// The SIPs in ring order when the lanes run one ring through them all: a
/// mesh without wrap links whose grid has an even side, where
/// [`grid_cycle`]'s snake steps between grid neighbours only, on the
/// global queues the rows and columns use. A row or column ring there
/// would close with a hop back across the whole row, and every ring step
/// would wait for it.
fn snake(g: &Group) -> Option<Vec<u32>> {
    lanes_take_the_snake(g).then(|| grid_cycle(g.grid.0, g.grid.1))
}

/// Whether the lanes run one ring along the snake ([`snake`]).
pub(crate) fn lanes_take_the_snake(g: &Group) -> bool {
    let (w, h) = g.grid;
    let even = w.is_multiple_of(2) || h.is_multiple_of(2);
    g.topology == SipTopology::Mesh2dNoWrap && w > 1 && h > 1 && even
}

/// The global queue from SIP `a` to its grid neighbour `b`.
fn toward(a: u32, b: u32, w: u32) -> QDir {
    match b {
        _ if b == a + 1 => QDir::GlobalE,
        _ if b + 1 == a => QDir::GlobalW,
        _ if b == a + w => QDir::GlobalS,
        _ => QDir::GlobalN,
    }
}

/// Where this participant's SIP sits on the snake: the snake's SIPs in
/// order, its position and the queues to its (next, previous) neighbours.
/// None unless the lanes take the snake ([`snake`]).
pub(super) fn on_snake(g: &Group, at: &Coords) -> Option<(Vec<u32>, usize, (QDir, QDir))> {
    let order = snake(g)?;
    let (n, w) = (order.len(), g.grid.0);
    let sip = (at.sy * w as usize + at.sx) as u32;
    let pos = order.iter().position(|&s| s == sip)?;
    let dirs = (
        toward(sip, order[(pos + 1) % n], w),
        toward(sip, order[(pos + n - 1) % n], w),
    );
    Some((order, pos, dirs))
}

/// This participant's snake ring both ways round (its position and the
/// directions of its neighbours on the snake).
fn snake_ring(tl: &mut Tl, g: &Group, at: &Coords, shift: usize) -> Option<[LevelRing; 2]> {
    let (order, pos, dirs) = on_snake(g, at)?;
    let c = g.cubes_per_sip() as usize;
    let digit = |cube: usize, _: usize, m: usize| order[m] as usize * c + cube;
    let level = Level::new("snake", order.len(), dirs, (c, 1), &digit);
    Some([0, 1].map(|d| level.way(tl, pos, at.cube, d, shift)))
}

impl Rings {
    fn new(tl: &mut Tl, g: &Group, at: &Coords, shift: usize) -> Rings {
        let c = g.cubes_per_sip() as usize;
        let (w, h) = (g.grid.0 as usize, g.grid.1 as usize);
        let order = &at.order;
        let p = |x: usize, y: usize, cube: usize| (y * w + x) * c + cube;
        let cube_digit = |_: usize, sip: usize, m: usize| sip * c + order[m] as usize;
        // First lane rings: the key is the cube, the job the other coordinate.
        let rows_first = |cube: usize, y: usize, x: usize| p(x, y, cube);
        let cols_first = |cube: usize, x: usize, y: usize| p(x, y, cube);
        // Second: the key is the fixed coordinate and the cube, one job.
        let rows_second = |key: usize, _: usize, x: usize| p(x, key / c, key % c);
        let cols_second = |key: usize, _: usize, y: usize| p(key / c, y, key % c);
        let intra = (QDir::IntraE, QDir::IntraW);
        let (e, s) = (
            (QDir::GlobalE, QDir::GlobalW),
            (QDir::GlobalS, QDir::GlobalN),
        );
        let levels = [
            Level::new("cube ring", c, intra, (1, w * h), &cube_digit),
            Level::new("rows first", w, e, (c, h), &rows_first),
            Level::new("columns first", h, s, (c, w), &cols_first),
            Level::new("rows second", w, e, (h * c, 1), &rows_second),
            Level::new("columns second", h, s, (w * c, 1), &cols_second),
        ];
        // (position, key) of this participant on each level.
        let on = [
            (at.pos, 0),
            (at.sx, at.cube),
            (at.sy, at.cube),
            (at.sx, at.sy * c + at.cube),
            (at.sy, at.sx * c + at.cube),
        ];
        let mut both = |l: usize| {
            let (pos, key) = on[l];
            [0, 1].map(|d| levels[l].way(tl, pos, key, d, shift))
        };
        Rings {
            cube: both(0),
            rows_first: both(1),
            cols_first: both(2),
            rows_second: both(3),
            cols_second: both(4),
            snake: snake_ring(tl, g, at, shift),
        }
    }
}

/// (half, lane direction) of the quarters, the directions in turn.
const QUARTERS: [(usize, usize); 4] = [(0, 0), (0, 1), (1, 0), (1, 1)];

/// Lane direction `q` of cube-ring half `half`: a quarter of every block.
fn quarter(half: usize, q: usize) -> Vec<Index> {
    vec![half.into(), q.into()]
}

/// The jobs of the three phases: the cube ring carries half `h` of every
/// block one way and half 1 − h the other; in the lane phases each ring
/// runs both ways with a quarter. Half 0 reduces along rows first, half 1
/// along columns first, so the first lane phase runs rows and columns at
/// once, and the second the other way round; on a grid of one row (or
/// column) both halves take its one dimension at once, not one after the
/// other (on a long ring every step costs a hop's latency); on a snake
/// every quarter runs around it in the first lane phase.
fn jobs(r: &Rings, g: &Group) -> [Vec<RingJob>; 3] {
    let sips = g.sip_count() as usize;
    let l0 = (0..sips)
        .flat_map(|s| (0..2).map(move |half| r.cube[half].job(s, vec![half.into()])))
        .collect();
    if let Some(snake) = &r.snake {
        let first = QUARTERS.map(|(half, q)| snake[q].job(0, quarter(half, q)));
        return [l0, first.to_vec(), Vec::new()];
    }
    let (w, h) = (g.grid.0 as usize, g.grid.1 as usize);
    let mut first = [Vec::new(), Vec::new()];
    let mut second = [Vec::new(), Vec::new()];
    for (half, rows_first) in [(0, w > 1), (1, h == 1)] {
        // Rows first: one ring per row, then the own column's ring.
        let (ring, rings, then) = if rows_first {
            (&r.rows_first, h, &r.cols_second)
        } else {
            (&r.cols_first, w, &r.rows_second)
        };
        for k in 0..rings {
            first[half].extend((0..2).map(|q| ring[q].job(k, quarter(half, q))));
        }
        second[half].extend((0..2).map(|q| then[q].job(0, quarter(half, q))));
    }
    let [first, second] = [first, second].map(alternate);
    [l0, first, second]
}

/// The jobs of both halves in turn (their rings advance atom by atom in
/// this order).
fn alternate([a, b]: [Vec<RingJob>; 2]) -> Vec<RingJob> {
    let n = a.len().max(b.len());
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    (0..n)
        .flat_map(|_| a.next().into_iter().chain(b.next()))
        .collect()
}

/// The participant-first buffer: blocks, cube-ring halves, lane quarters,
/// pieces.
fn buffer(tl: &mut Tl, a: &KernelArgs) -> Buffer {
    let (n, elems) = (a.group.size(), a.job.elems);
    let pieces = a.pieces(elems / (n * 4), 1);
    Buffer::new(a.buffer(tl), elems, &[n, 2, 2, pieces])
}

/// Reduce-scatter or all-gather of participant `me`.
pub(super) fn kernel(tl: &mut Tl, a: &KernelArgs, at: &Coords) {
    if a.group.size() == 1 {
        return;
    }
    let mut buf = buffer(tl, a);
    if a.job.collective == Collective::ReduceScatter {
        reduce_scatter_levels(tl, a, at, &mut buf);
    } else {
        all_gather_levels(tl, a, at, &mut buf);
    }
}

/// The reduce-scatter levels; the participant's own block is stored at the end.
fn reduce_scatter_levels(tl: &mut Tl, a: &KernelArgs, at: &Coords, buf: &mut Buffer) {
    let g = &a.group;
    let rings = Rings::new(tl, g, at, 1);
    for level in jobs(&rings, g) {
        reduce_scatter(tl, a.job.op, buf, &level);
    }
    let own = tl.param(at.me as i64);
    buf.store(tl, &buf.atoms(&[own.into()]));
}

/// The all-gather levels from the participant's own block in place; every block
/// it receives is final, stored at once and kept for the next level.
fn all_gather_levels(tl: &mut Tl, a: &KernelArgs, at: &Coords, buf: &mut Buffer) {
    let g = &a.group;
    let rings = Rings::new(tl, g, at, 0);
    let [l0, l1, l2] = jobs(&rings, g);
    let (c, lanes) = (g.cubes_per_sip(), g.sip_count());
    let keep = |reuse| Keep {
        own: false,
        received: true,
        reuse,
    };
    let own = |jobs: &[RingJob]| -> Vec<Sym> { jobs.iter().map(|j| j.ring.me).collect() };
    all_gather(tl, buf, &l2, &own(&l2), keep(lanes > 1 || c > 1));
    all_gather(tl, buf, &l1, &own(&l1), keep(c > 1));
    all_gather(tl, buf, &l0, &own(&l0), keep(false));
}
