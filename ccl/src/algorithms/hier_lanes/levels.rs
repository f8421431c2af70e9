//! hier_lanes' all-reduce (and reduce) over a level-nested buffer: the
//! buffer is split first in two halves, each half over the cube ring, then
//! in two quarters (the lane rings' two directions), then over the first
//! lane ring, then the second. A ring block of every level is then one
//! contiguous block, sent in slot-sized pieces, however many SIPs there
//! are: a participant sends `O(steps · pieces)` messages, not one per
//! participant block (the participant-first layout of [`super::blocks`],
//! which reduce-scatter and all-gather need for where their results land,
//! sends a piece of every participant's block at every step).
//!
//! Each level works in its own cut of the buffer where it needs one
//! ([`Cut`]): the second lane ring's blocks are finer than the first's, and
//! where the first's are a small part of a slot the cube ring takes coarser
//! pieces than theirs. A level in a new cut gets what it owns through
//! memory: the level before stores its owned blocks, the level loads them
//! in its cut (and the all-gather back stores what it gathers for the
//! coarser level to reload). Half 0 takes the rows first, half 1 the
//! columns, so both lane phases use every lane; on a grid of one row or
//! column, or along a mesh's snake, both halves take the one lane ring and
//! there is no second.

use super::Coords;
use super::blocks::on_snake;
use crate::kernels::{Buffer, Keep, Ring, RingJob, all_gather, reduce_scatter};
use crate::{Collective, Group, KernelArgs};
use kernbench_runtime::kernel::{Index, Sym, Tl};
use kernbench_systems::program::QDir;

/// A lane ring of one half: its size, this participant's position on it and
/// its (next, previous) queues.
#[derive(Clone, Copy)]
struct Lane {
    n: usize,
    pos: usize,
    dirs: (QDir, QDir),
}

impl Lane {
    const NONE: Lane = Lane {
        n: 1,
        pos: 0,
        dirs: (QDir::GlobalE, QDir::GlobalW),
    };

    /// The ring walked `way` round (1: reversed).
    fn ring(self, tl: &mut Tl, way: usize) -> Ring {
        let r = Ring {
            n: self.n,
            me: tl.param(self.pos as i64),
            next: self.dirs.0,
            prev: self.dirs.1,
        };
        if way == 0 { r } else { r.reversed() }
    }
}

/// The two lane rings of each half, first then second.
fn lanes(g: &Group, at: &Coords) -> [[Lane; 2]; 2] {
    let (w, h) = (g.grid.0 as usize, g.grid.1 as usize);
    if let Some((order, pos, dirs)) = on_snake(g, at) {
        let snake = Lane {
            n: order.len(),
            pos,
            dirs,
        };
        return [[snake, Lane::NONE], [snake, Lane::NONE]];
    }
    let row = Lane {
        n: w,
        pos: at.sx,
        dirs: (QDir::GlobalE, QDir::GlobalW),
    };
    let col = Lane {
        n: h,
        pos: at.sy,
        dirs: (QDir::GlobalS, QDir::GlobalN),
    };
    match (w > 1, h > 1) {
        (true, true) => [[row, col], [col, row]],
        (true, false) => [[row, Lane::NONE], [row, Lane::NONE]],
        (false, _) => [[col, Lane::NONE], [col, Lane::NONE]],
    }
}

/// Per half: the cube ring's job, then per quarter the first and second
/// lane rings' jobs, each over the block this participant owns after the
/// level before.
struct Jobs {
    cube: Vec<RingJob>,
    first: Vec<RingJob>,
    second: Vec<RingJob>,
}

impl Jobs {
    fn new(tl: &mut Tl, c: usize, at: &Coords, lanes: &[[Lane; 2]; 2]) -> Jobs {
        let job = |ring: Ring, prefix: Vec<Index>| RingJob {
            ring,
            prefix,
            order: None,
            suffix: Vec::new(),
        };
        let cube_lane = Lane {
            n: c,
            pos: at.pos,
            dirs: (QDir::IntraE, QDir::IntraW),
        };
        let (mut cube, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
        // Quarter q of both halves in turn, so the halves' rings advance together.
        let mut owned: [Sym; 2] = [Sym::from(0usize); 2];
        for (half, own) in owned.iter_mut().enumerate() {
            let j = job(cube_lane.ring(tl, half), vec![half.into()]);
            *own = j.owned();
            cube.push(j);
        }
        for q in 0..2 {
            for half in 0..2 {
                let [a, b] = lanes[half];
                let prefix = vec![half.into(), owned[half].into(), q.into()];
                let j = job(a.ring(tl, q), prefix.clone());
                let mut inner = prefix;
                inner.push(j.owned().into());
                first.push(j);
                second.push(job(b.ring(tl, q), inner));
            }
        }
        Jobs {
            cube,
            first,
            second,
        }
    }

    /// The blocks each job owns after its reduce-scatter.
    fn owned(jobs: &[RingJob]) -> Vec<Sym> {
        jobs.iter().map(RingJob::owned).collect()
    }
}

/// How finely a level cuts the buffer: its atoms are ring blocks of the
/// cube ring, the first lane ring or the second, each in pieces.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Cut {
    Cube,
    First,
    Second,
}

impl Cut {
    /// The participant's buffer in this cut.
    fn buffer(self, tl: &mut Tl, a: &KernelArgs, lanes: &[[Lane; 2]; 2]) -> Buffer {
        let c = a.group.cubes_per_sip() as usize;
        let tails = (0..2)
            .map(|half| {
                let rings = (lanes[half][0].n, lanes[half][1].n);
                let mut radices = self.radices(c, rings);
                let blocks = self.blocks(c, rings);
                radices.push(slot_pieces(a, a.job.elems / blocks));
                radices
            })
            .collect();
        Buffer::ragged(a.buffer(tl), a.job.elems, tails)
    }

    /// How many blocks the buffer has in this cut, were both halves cut as
    /// this one.
    fn blocks(self, c: usize, rings: (usize, usize)) -> usize {
        2 * self.radices(c, rings).iter().product::<usize>()
    }

    /// A half's radices down to this cut's blocks, for `c` cubes per SIP
    /// and lane rings of `(x, y)` SIPs.
    fn radices(self, c: usize, (x, y): (usize, usize)) -> Vec<usize> {
        match self {
            Cut::Cube => vec![c],
            Cut::First => vec![c, 2, x],
            Cut::Second => vec![c, 2, x, y],
        }
    }
}

/// The cuts (lane rings, cube ring) of an all-reduce of `elems` in pieces
/// of at most `max_bytes`, for `c` cubes per SIP and half 0's lane rings of
/// `rings` SIPs (a second ring of 1: none). Every level works in the finest
/// cut it can, so no level hands over through memory, unless the blocks
/// there are a quarter slot or less (pieces so short that few slots cannot
/// keep them streaming): then the lane rings take the first ring's cut, and
/// the cube ring its own where a SIP has 8 cubes or more and the first lane
/// ring 8 SIPs or more. A hand-over costs `3S/cA` (lanes) or `3S/c` (cube
/// ring) more HBM traffic, against the `2S` the all-reduce moves anyway,
/// and the next level no longer starts on blocks while the level before
/// finishes others: on 4 SIPs of 16 cubes at 1 MiB the cube ring's own cut
/// made the all-reduce 44 % slower, on 64 and 256 SIPs 17–35 % faster. The
/// estimate counts sends by the same choice.
pub(super) fn cuts(
    c: usize,
    rings: (usize, usize),
    (elems, max_bytes): (usize, u64),
) -> (Cut, Cut) {
    let tiny = |cut: Cut| 4 * (2 * elems / cut.blocks(c, rings)) as u64 <= max_bytes;
    let lane_cut = if rings.1 > 1 && !tiny(Cut::Second) {
        Cut::Second
    } else {
        Cut::First
    };
    let cube_cut = if c >= 8 && rings.0 >= 8 && tiny(lane_cut) {
        Cut::Cube
    } else {
        lane_cut
    };
    (lane_cut, cube_cut)
}

/// The pieces of a block of `elems`: the config's, and at least enough that
/// none is larger than a slot, so a ring step's block streams through its
/// queue piece by piece however few participants split the buffer.
pub(super) fn slot_pieces(a: &KernelArgs, elems: usize) -> usize {
    let slot_elems = (a.piece_limits.max_bytes / 2).max(1) as usize;
    a.pieces(elems, 1).max(elems.div_ceil(slot_elems))
}

/// Stores the blocks the jobs own, so a level in another cut can load them.
fn store_owned(tl: &mut Tl, buf: &mut Buffer, jobs: &[RingJob]) {
    for j in jobs {
        buf.store(tl, &buf.atoms(&j.block(j.owned())));
    }
}

/// All-reduce: reduce-scatter down the levels, all-gather back up; a reduce
/// the same with only participant 0 storing the result. A level whose cut
/// differs from the one before hands over through memory: the blocks it
/// owns are stored in one cut and loaded in the other.
pub(super) fn all_reduce(tl: &mut Tl, a: &KernelArgs, at: &Coords) {
    if a.group.size() == 1 {
        return;
    }
    let c = a.group.cubes_per_sip() as usize;
    let lanes = lanes(&a.group, at);
    let jobs = Jobs::new(tl, c, at, &lanes);
    let second = lanes[0][1].n > 1;
    let rings = (lanes[0][0].n, lanes[0][1].n);
    let (lane_cut, cube_cut) = cuts(c, rings, (a.job.elems, a.piece_limits.max_bytes));
    let fine_cut = if second { Cut::Second } else { lane_cut };
    let mut buf = cube_cut.buffer(tl, a, &lanes);
    reduce_scatter(tl, a.job.op, &mut buf, &jobs.cube);
    if cube_cut != lane_cut {
        store_owned(tl, &mut buf, &jobs.cube);
        buf = lane_cut.buffer(tl, a, &lanes);
    }
    reduce_scatter(tl, a.job.op, &mut buf, &jobs.first);
    if lane_cut != fine_cut {
        store_owned(tl, &mut buf, &jobs.first);
        buf = fine_cut.buffer(tl, a, &lanes);
    }
    if second {
        reduce_scatter(tl, a.job.op, &mut buf, &jobs.second);
    }
    // Blocks a coarser cut reloads are stored by everyone.
    let stores = a.job.collective == Collective::AllReduce || at.me == 0;
    let hand_over = stores || cube_cut != fine_cut;
    let keep = |own, reuse| Keep {
        own,
        received: hand_over,
        reuse,
    };
    if second {
        let own = Jobs::owned(&jobs.second);
        all_gather(
            tl,
            &mut buf,
            &jobs.second,
            &own,
            keep(hand_over, lane_cut == fine_cut),
        );
    }
    if lane_cut != fine_cut {
        buf = lane_cut.buffer(tl, a, &lanes);
    }
    let first_own = Jobs::owned(&jobs.first);
    let reuse = c > 1 && cube_cut == lane_cut;
    all_gather(
        tl,
        &mut buf,
        &jobs.first,
        &first_own,
        keep(hand_over && !second, reuse),
    );
    if cube_cut != lane_cut {
        buf = cube_cut.buffer(tl, a, &lanes);
    }
    let keep = Keep {
        own: false,
        received: stores,
        reuse: false,
    };
    all_gather(tl, &mut buf, &jobs.cube, &Jobs::owned(&jobs.cube), keep);
}
