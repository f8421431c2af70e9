//! `hier_lanes`: hierarchical collectives that use every cube's inter-SIP
//! lane. Within a SIP, a reduce-scatter over a ring through the cube mesh
//! leaves each cube with 1/C of the SIP's sum; each cube then reduces its
//! share with the same cube of the other SIPs over its own lanes (rings
//! along rows on global_E/W and columns on global_S/N, or one ring along
//! the snake of a mesh); the all-gather levels run the same rings back.
//! Every ring runs in both directions at once (half of the data each way)
//! so every link direction carries traffic ([`blocks`]).
//!
//! All-reduce runs both halves; reduce too, with only participant 0
//! storing what it gathers (a ring gather to one member costs what the
//! all-gather costs); reduce-scatter stops after the reduce-scatter levels
//! and all-gather starts from the all-gather levels. Broadcast pipelines
//! the root's shares over the lanes and every SIP's cube ring
//! ([`broadcast`]).

mod blocks;
mod broadcast;

pub(crate) use blocks::lanes_take_the_snake;

use super::primitives::me;
use crate::ccl::kernels::grid_cycle;
use crate::ccl::{Algorithm, Collective, Group, KernelArgs};
use crate::kernel::Tl;
use crate::kernel::wiring::QueueConfig;
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
        _ => blocks::all_reduce(tl, a, &at),
    }
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
