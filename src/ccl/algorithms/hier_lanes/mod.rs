//! `hier_lanes`: hierarchical collectives that use every cube's inter-SIP
//! lane. Within a SIP, a reduce-scatter over a ring through the cube mesh
//! leaves each cube with 1/C of the SIP's sum; each cube then all-reduces
//! its share with the same cube of the other SIPs over its own lanes (a ring
//! per grid dimension: rows on global_E/W, then columns on global_S/N); an
//! all-gather over the cube ring completes the result. Every ring runs in
//! both directions at once (half of the data each way) so every link
//! direction carries traffic, and `chunks` pipelines each transfer.
//!
//! Reduce runs the same rings; only participant 0 stores what it gathers
//! (a ring gather to one member costs what the all-gather costs).
//! Reduce-scatter stops after the reduce-scatter levels and all-gather
//! starts from the all-gather levels ([`blocks`]); broadcast pipelines the
//! root's shares over the lanes and every SIP's cube ring ([`broadcast`]).

mod blocks;
mod broadcast;

use super::ring::me;
use crate::ccl::kernels::{Buffer, Keep, Ring, RingJob, all_gather, grid_cycle, reduce_scatter};
use crate::ccl::{Algorithm, Collective, Group, KernelArgs};
use crate::kernel::wiring::QueueConfig;
use crate::kernel::{Index, Sym, Tl};
use kernbench_systems::ipcq::Entry;
use kernbench_systems::program::QDir;

pub struct HierLanes;

/// Where a participant sits: its index, its cube and the cube's position
/// on the cube ring (`order`: the cubes in ring order), its SIP's column
/// and row in the SIP grid.
struct Coords {
    me: usize,
    cube: usize,
    pos: usize,
    sx: usize,
    sy: usize,
    order: Vec<u32>,
}

impl Coords {
    fn of(tl: &mut Tl, g: &Group) -> Coords {
        let me = me(tl, g);
        let c = g.cubes_per_sip() as usize;
        let (sip, cube) = (me / c, me % c);
        let order = grid_cycle(g.cubes.0, g.cubes.1);
        let pos = order
            .iter()
            .position(|&x| x as usize == cube)
            .expect("every cube is on the ring");
        let w = g.grid.0 as usize;
        Coords {
            me,
            cube,
            pos,
            sx: sip % w,
            sy: sip / w,
            order,
        }
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let at = Coords::of(tl, &a.group);
    match a.job.collective {
        Collective::ReduceScatter | Collective::AllGather => blocks::kernel(tl, a, &at),
        Collective::Broadcast => broadcast::kernel(tl, a, &at),
        _ => all_reduce(tl, a, &at),
    }
}

/// All-reduce, or reduce (only participant 0 stores).
fn all_reduce(tl: &mut Tl, a: &KernelArgs, at: &Coords) {
    let g = a.group;
    let me = at.me;
    let c = g.cubes_per_sip() as usize;
    let (w, h) = (g.grid.0 as usize, g.grid.1 as usize);
    // Ring positions are parameters, so every participant shares one program.
    let (pos, sx, sy) = (
        tl.param(at.pos as i64),
        tl.param(at.sx as i64),
        tl.param(at.sy as i64),
    );
    let op = a.job.op;
    // Blocks are loaded as the rings reach them and stored once final.
    // Two halves, one per cube-ring direction; with one cube per SIP they still
    // double the pipeline depth of the lane rings, which pays for itself.
    let halves = 2;
    let mut buf = Buffer::new(
        a.buffer(tl),
        a.job.elems,
        &[
            halves,
            c,
            2,
            w,
            h,
            a.pieces(a.job.elems / (halves * c * 2 * w * h), 1),
        ],
    );
    let job = |ring: Ring, prefix: Vec<Index>| RingJob {
        ring,
        prefix,
        order: None,
        suffix: Vec::new(),
    };

    // Level 0: the cube ring, both directions (half of the buffer each).
    let intra = Ring {
        n: c,
        me: pos,
        next: QDir::IntraE,
        prev: QDir::IntraW,
    };
    let l0: Vec<RingJob> = (0..halves)
        .map(|half| {
            let ring = if half == 0 { intra } else { intra.reversed() };
            job(ring, vec![half.into()])
        })
        .collect();
    reduce_scatter(tl, op, &mut buf, &l0);
    let own0: Vec<Sym> = l0.iter().map(|j| j.owned()).collect();

    // Level 1: rows of SIPs on global_E/W; level 2: columns on global_S/N.
    let row = Ring {
        n: w,
        me: sx,
        next: QDir::GlobalE,
        prev: QDir::GlobalW,
    };
    let col = Ring {
        n: h,
        me: sy,
        next: QDir::GlobalS,
        prev: QDir::GlobalN,
    };
    // (cube-ring half, lane direction) of each piece this cube all-reduces.
    let pieces: Vec<(usize, usize)> = (0..halves)
        .flat_map(|half| [(half, 0), (half, 1)])
        .collect();
    let l1: Vec<RingJob> = pieces
        .iter()
        .map(|&(half, q)| {
            let ring = if q == 0 { row } else { row.reversed() };
            job(ring, vec![half.into(), own0[half].into(), q.into()])
        })
        .collect();
    reduce_scatter(tl, op, &mut buf, &l1);
    let own1: Vec<Sym> = l1.iter().map(|j| j.owned()).collect();
    let l2: Vec<RingJob> = pieces
        .iter()
        .zip(&own1)
        .map(|(&(half, q), &o1)| {
            let ring = if q == 0 { col } else { col.reversed() };
            job(
                ring,
                vec![half.into(), own0[half].into(), q.into(), o1.into()],
            )
        })
        .collect();
    reduce_scatter(tl, op, &mut buf, &l2);
    let own2: Vec<Sym> = l2.iter().map(|j| j.owned()).collect();
    // After the column all-gather, every atom this cube holds is final; the
    // row and cube-ring all-gathers send on what the previous level gathered
    // (when there is a next level, the received tiles stay in registers).
    // A reduce gathers like the all-reduce but only participant 0 stores
    // (the rings need every member to forward).
    let stores = a.job.collective == Collective::AllReduce || me == 0;
    let keep = |own, reuse| Keep {
        own: own && stores,
        received: stores,
        reuse,
    };
    all_gather(tl, &mut buf, &l2, &own2, keep(true, w > 1 || c > 1));
    all_gather(tl, &mut buf, &l1, &own1, keep(false, c > 1));
    all_gather(tl, &mut buf, &l0, &own0, keep(false, false));
}

impl Algorithm for HierLanes {
    fn name(&self) -> &'static str {
        "hier_lanes"
    }
    fn summary(&self) -> &'static str {
        "intra-SIP reduce-scatter, per-cube inter-SIP all-reduce on every lane, intra-SIP all-gather (for reduce, only participant 0 stores; reduce-scatter and all-gather run their half); bidirectional rings; broadcast as pipelined trees over the cube rings and lanes"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::Broadcast,
            Collective::Reduce,
        ]
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Vec<(u32, Vec<Entry>)> {
        let c = g.cubes_per_sip() as usize;
        let order = grid_cycle(g.cubes.0, g.cubes.1);
        let (w, h) = g.grid;
        let mut out = Vec::new();
        for sip in 0..g.sips {
            let (sx, sy) = (sip % w, sip / w);
            for (pos, &cube) in order.iter().enumerate() {
                let mut e = Vec::new();
                let pe = |s: u32, cb: u32| g.pe(g.participant(s, cb));
                if c > 1 {
                    e.push(q.entry(QDir::IntraE, pe(sip, order[(pos + 1) % c]), QDir::IntraW));
                    e.push(q.entry(
                        QDir::IntraW,
                        pe(sip, order[(pos + c - 1) % c]),
                        QDir::IntraE,
                    ));
                }
                if w > 1 {
                    e.push(q.entry(
                        QDir::GlobalE,
                        pe(sy * w + (sx + 1) % w, cube),
                        QDir::GlobalW,
                    ));
                    e.push(q.entry(
                        QDir::GlobalW,
                        pe(sy * w + (sx + w - 1) % w, cube),
                        QDir::GlobalE,
                    ));
                }
                if h > 1 {
                    e.push(q.entry(
                        QDir::GlobalS,
                        pe(((sy + 1) % h) * w + sx, cube),
                        QDir::GlobalN,
                    ));
                    e.push(q.entry(
                        QDir::GlobalN,
                        pe(((sy + h - 1) % h) * w + sx, cube),
                        QDir::GlobalS,
                    ));
                }
                out.push((pe(sip, cube), e));
            }
        }
        out
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
}
