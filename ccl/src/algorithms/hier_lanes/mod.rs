//! `hier_lanes`: hierarchical collectives that use every cube's inter-SIP
//! lane. Within a SIP, a reduce-scatter over a ring through the cube mesh
//! leaves each cube with 1/C of the SIP's sum; each cube then reduces its
//! share with the same cube of the other SIPs over its own lanes (rings
//! along rows on global_E/W and columns on global_S/N, or one ring along
//! the snake of a mesh); the all-gather levels run the same rings back.
//! Every ring runs in both directions at once (half of the data each way)
//! so every link direction carries traffic ([`blocks`]).
//!
//! Reduce-scatter and all-gather must leave each result where `split(S,
//! P)` puts it: over contiguous nested blocks, outermost level first, when
//! the buffer splits evenly and blocks are small against the SIP count
//! ([`nested`]), else over participant blocks ([`blocks`]). All-reduce (and
//! reduce, with only participant 0 storing what it gathers) may cut the
//! buffer any way, and cuts it level by level so every ring step moves one
//! contiguous block ([`levels`]). Broadcast pipelines the root's shares
//! over the lanes and every SIP's cube ring ([`broadcast`]).

mod blocks;
mod broadcast;
mod levels;
mod nested;

use blocks::lanes_take_the_snake;

use super::primitives::me;
use crate::cost::{CostTerms, HeldPrograms, InFlight, participants};
use crate::kernels::grid_cycle;
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_systems::ipcq::Tables;
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
        Collective::ReduceScatter | Collective::AllGather
            if nested::chosen(&a.group, a.job.elems) =>
        {
            nested::kernel(tl, a, &at)
        }
        Collective::ReduceScatter | Collective::AllGather => blocks::kernel(tl, a, &at),
        Collective::Broadcast => broadcast::kernel(tl, a, &at),
        _ => levels::all_reduce(tl, a, &at),
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
    /// The reducing and gathering levels: rings along rows and columns,
    /// every SIP in step. A broadcast or reduce has a root, so its SIPs
    /// differ.
    fn folds(&self, _g: &Group, c: Collective) -> bool {
        matches!(
            c,
            Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather
        )
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let c = g.cubes_per_sip() as usize;
        let order = grid_cycle(g.cubes.0, g.cubes.1);
        let (w, h) = g.grid;
        let mut out = Vec::new();
        for sip in (0..g.sip_count()).filter(|&m| g.simulates_sip(m)) {
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
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, max_piece: f64) -> CostTerms {
        let p = participants(g);
        let cubes = f64::from(g.cubes_per_sip());
        let (w, h) = (f64::from(g.grid.0), f64::from(g.grid.1));
        // A folded group runs only its simulated SIPs' programs.
        let simulated = g.simulated_size().max(1) as f64;
        let (pw, ph) = g.simulated_grid();
        let rings = HeldPrograms::Looped {
            programs: f64::from(pw * ph),
            ops_per_chunk: 3.0 * 64.0,
        };
        let (sends, bytes_per_send, stages, lockstep, programs) = match c {
            // Reduce-scatter and all-gather over the nested cut: each
            // level's ring both ways over contiguous blocks ([`nested::sends`]).
            Collective::ReduceScatter | Collective::AllGather
                if nested::chosen(g, (bytes / 2.0) as usize) =>
            {
                let (sends, per_send) = nested::sends(g, bytes);
                (sends, per_send, 1, simulated, rings)
            }
            // Participant-first: a send per quarter of a participant block
            // (S/4p) and ring step; the cube ring moves a half of every SIP's
            // blocks, the lanes a quarter of each block of the rings'
            // participants ([`lane_block_sends`]); a program per SIP at most,
            // stepping in loops.
            Collective::ReduceScatter | Collective::AllGather => {
                (lane_block_sends(g), bytes / (4.0 * p), 1, simulated, rings)
            }
            // Broadcast: 2c trees (two parts of a share per cube), each over
            // every participant: about 2c sends of S/2c per participant,
            // piece by piece down the deepest participant's path (the cube ring
            // twice, a row and a column); a few ops per tree and piece on
            // every participant.
            Collective::Broadcast => (
                2.0 * cubes,
                bytes / (2.0 * cubes),
                (2.0 * (cubes - 1.0) + w + h - 2.0).max(1.0) as usize,
                1.0,
                HeldPrograms::Looped {
                    programs: g.size() as f64,
                    ops_per_chunk: 2.0 * cubes * 3.0,
                },
            ),
            // All-reduce and reduce: the level-nested rings of [`levels`]
            // down and back up, each send a first-lane block of S/4cA or a
            // piece of it ([`level_sends`]). Only participant 0 stores what
            // a reduce's rings gather, and the rest wait on it now and then.
            Collective::Reduce => {
                let (sends, bytes) = level_sends(g, bytes, max_piece);
                (sends, bytes, 1, simulated / 2.0, rings)
            }
            Collective::AllReduce | Collective::AllToAll => {
                let (sends, bytes) = level_sends(g, bytes, max_piece);
                (sends, bytes, 1, simulated, rings)
            }
        };
        CostTerms {
            sends,
            bytes_per_send,
            stages,
            lockstep,
            // Four pieces of a ring step's block.
            register_pieces: 4.0,
            programs,
            fanout: 1.0,
            in_flight: InFlight::Messages(12.0),
        }
    }
}

/// Sends per participant of the all-reduce over nested levels and their
/// mean size, down and back up, in the cuts [`levels`] chooses. In the
/// finest cut the cube ring's c − 1 steps send both halves' first-lane
/// blocks (2 · 2A of S/4cA) and each lane ring's steps one block per
/// quarter and half (4 per step; the second ring's are A times smaller,
/// counted as whole ones). Where [`levels::cuts`] gives the cube ring its
/// own cut, its steps send each half's block of S/2c instead, in pieces of
/// at most `max_piece`. `A` is the first lane ring's length (the mean of
/// the two halves'), `B` the second's.
fn level_sends(g: &Group, bytes: f64, max_piece: f64) -> (f64, f64) {
    let cubes = f64::from(g.cubes_per_sip());
    let (w, h) = (f64::from(g.grid.0), f64::from(g.grid.1));
    let snake = lanes_take_the_snake(g) || w == 1.0 || h == 1.0;
    let (a, b) = if snake {
        (w * h, 1.0)
    } else {
        ((w + h) / 2.0, (w + h) / 2.0)
    };
    let lane_block = bytes / (4.0 * cubes * a);
    let lane_sends = 4.0 * (a - 1.0) + 4.0 * (b - 1.0);
    // Half 0's lane rings: the snake or the one line, else a row then a column.
    let rings = if snake {
        ((w * h) as usize, 1)
    } else {
        (w as usize, h as usize)
    };
    let limits = ((bytes / 2.0) as usize, max_piece as u64);
    let (_, cube_cut) = levels::cuts(cubes as usize, rings, limits);
    let (cube_sends, cube_bytes) = if cube_cut == levels::Cut::Cube {
        let block = bytes / (2.0 * cubes);
        let pieces = (block / max_piece).ceil().max(1.0);
        (2.0 * (cubes - 1.0) * pieces, 2.0 * (cubes - 1.0) * block)
    } else {
        let sends = 4.0 * a * (cubes - 1.0);
        (sends, sends * lane_block)
    };
    let sends = cube_sends + lane_sends;
    let moved = cube_bytes + lane_sends * lane_block;
    (2.0 * sends, moved / sends)
}

/// Sends per participant of the reduce-scatter and all-gather, each of a
/// quarter of a participant block: the cube ring's c − 1 steps move half of
/// each of the SIP's wh blocks per direction (4wh(c − 1)); the lanes run
/// one ring through every SIP on a mesh with an even side (4(wh − 1)), both
/// halves along the one line of a ring of SIPs, else rows then columns for
/// one half and columns then rows for the other.
fn lane_block_sends(g: &Group) -> f64 {
    let cubes = f64::from(g.cubes_per_sip());
    let (w, h) = (f64::from(g.grid.0), f64::from(g.grid.1));
    let one_ring = lanes_take_the_snake(g) || w == 1.0 || h == 1.0;
    let lanes = if one_ring {
        4.0 * (w * h - 1.0)
    } else {
        2.0 * h * (w - 1.0) + 2.0 * w * (h - 1.0) + 2.0 * (w - 1.0) + 2.0 * (h - 1.0)
    };
    4.0 * w * h * (cubes - 1.0) + lanes
}
