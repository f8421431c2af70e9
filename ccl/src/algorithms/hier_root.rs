//! `hier_root` (alias `adr0032`, its first name): the intercube hierarchical
//! all-reduce through one root cube, as first designed (one lane between SIPs).
//!
//! pe0 of every cube takes part; the root cube is the geometric centre of the
//! cube mesh (col w/2, row h/2). Phase 1 reduces each row bidirectionally
//! onto the root column, phase 2 reduces the root column onto the root row,
//! phase 3 exchanges between SIPs on the root cube (ring_1d: n−1 rounds of
//! send global_E / recv global_W; torus_2d: a row ring then a column ring;
//! mesh_2d_no_wrap: chain reduce + broadcast per dimension), phase 4
//! broadcasts down the root column and phase 5 along every row. A 1×1 cube
//! mesh goes straight to phase 3. `chunks` pipelines every phase.

use super::primitives::me;
use crate::cost::{CostTerms, HeldPrograms, InFlight, participants};
use crate::kernels::{Buffer, combine};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::Tile;
use kernbench_runtime::kernel::Tl;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_spec::spec::SipTopology;
use kernbench_spec::topology::{Dir, grid_neighbor};
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

pub struct HierRoot;

fn mesh_dir(d: Dir) -> QDir {
    [QDir::N, QDir::E, QDir::S, QDir::W][d as usize]
}

fn global_dir(d: Dir) -> QDir {
    [QDir::GlobalN, QDir::GlobalE, QDir::GlobalS, QDir::GlobalW][d as usize]
}

/// Reduces a line of `len` participants onto position `root` from both sides:
/// participants before the root pass towards `up` (their `to_root` side),
/// participants after it towards `down`.
fn line_reduce(
    tl: &mut Tl,
    a: &KernelArgs,
    buf: &mut Buffer,
    pos: u32,
    len: u32,
    root: u32,
    dirs: (Dir, Dir),
) {
    let (towards_end, towards_start) = dirs; // e.g. (E, W) for a row
    let all = buf.atoms(&[]);
    if pos < root {
        if pos > 0 {
            for c in &all {
                buf.recv_combine(
                    tl,
                    a.job.op,
                    c,
                    mesh_dir(towards_start),
                    Some(mesh_dir(towards_end)),
                );
            }
        } else {
            buf.send(tl, &all, mesh_dir(towards_end));
        }
    } else if pos > root {
        if pos + 1 < len {
            for c in &all {
                buf.recv_combine(
                    tl,
                    a.job.op,
                    c,
                    mesh_dir(towards_end),
                    Some(mesh_dir(towards_start)),
                );
            }
        } else {
            buf.send(tl, &all, mesh_dir(towards_start));
        }
    } else {
        for (has, from) in [(root > 0, towards_start), (root + 1 < len, towards_end)] {
            if has {
                for c in &all {
                    buf.recv_combine(tl, a.job.op, c, mesh_dir(from), None);
                }
            }
        }
    }
}

/// The inverse of [`line_reduce`]: the root sends both ways, others pass it on.
fn line_broadcast(tl: &mut Tl, buf: &mut Buffer, pos: u32, len: u32, root: u32, dirs: (Dir, Dir)) {
    let (towards_end, towards_start) = dirs;
    let all = buf.atoms(&[]);
    if pos == root {
        if root > 0 {
            buf.send(tl, &all, mesh_dir(towards_start));
        }
        if root + 1 < len {
            buf.send(tl, &all, mesh_dir(towards_end));
        }
    } else if pos < root {
        let to = (pos > 0).then_some(mesh_dir(towards_start));
        for c in &all {
            buf.recv_replace(tl, c, mesh_dir(towards_end), to);
        }
    } else {
        let to = (pos + 1 < len).then_some(mesh_dir(towards_end));
        for c in &all {
            buf.recv_replace(tl, c, mesh_dir(towards_start), to);
        }
    }
}

/// Phase 3 ring: n−1 rounds; each round passes on what arrived last round.
/// The rounds that forward are one loop carrying the running sums.
fn pass_around(tl: &mut Tl, a: &KernelArgs, buf: &mut Buffer, n: u32, fwd: Dir) {
    if n < 2 {
        return;
    }
    let (send, recv) = (global_dir(fwd), global_dir(fwd.opposite()));
    let all = buf.atoms(&[]);
    buf.send(tl, &all, send);
    let round = |tl: &mut Tl, buf: &Buffer, sums: &[Tile], forward: bool| -> Vec<Tile> {
        let mut out = Vec::with_capacity(sums.len());
        for (c, &sum) in all.iter().zip(sums) {
            let x = tl.recv_part(recv, &buf.part(c));
            if forward {
                tl.send(send, x);
            }
            out.push(combine(tl, a.job.op, sum, x));
        }
        out
    };
    let sums: Vec<Tile> = all.iter().map(|c| buf.tile(c)).collect();
    let forwarding = n as usize - 2;
    let sums = tl.repeat(forwarding, &sums, |tl, _, sums| round(tl, buf, sums, true));
    let sums = round(tl, buf, &sums, false);
    for (c, t) in all.iter().zip(sums) {
        buf.set(c, t);
    }
}

/// Phase 3 mesh: chain reduce towards the far end, then broadcast back.
fn chain(tl: &mut Tl, a: &KernelArgs, buf: &mut Buffer, pos: u32, len: u32, fwd: Dir) {
    if len < 2 {
        return;
    }
    let (ahead, back) = (global_dir(fwd), global_dir(fwd.opposite()));
    let all = buf.atoms(&[]);
    if pos == 0 {
        buf.send(tl, &all, ahead);
    } else {
        let to = (pos + 1 < len).then_some(ahead);
        for c in &all {
            buf.recv_combine(tl, a.job.op, c, back, to);
        }
    }
    if pos + 1 == len {
        buf.send(tl, &all, back);
    } else {
        let to = (pos > 0).then_some(back);
        for c in &all {
            buf.recv_replace(tl, c, ahead, to);
        }
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let g = &a.group;
    let me = me(tl, g);
    let (sip, cube) = (
        (me / g.cubes_per_sip() as usize) as u32,
        me as u32 % g.cubes_per_sip(),
    );
    let (cw, ch) = g.cubes;
    let (cx, cy) = (cube % cw, cube / cw);
    let (root_col, root_row) = (cw / 2, ch / 2);
    let mut buf = Buffer::new(a.buffer(tl), a.job.elems, &[a.pieces(a.job.elems, 1)]);
    let all = buf.atoms(&[]);
    buf.load(tl, &all);
    // Phases 1-2: rows onto the root column, then the root column onto the root
    // row.
    line_reduce(tl, a, &mut buf, cx, cw, root_col, (Dir::E, Dir::W));
    if cx == root_col {
        line_reduce(tl, a, &mut buf, cy, ch, root_row, (Dir::S, Dir::N));
    }
    // Phase 3 on the root cube.
    if cx == root_col && cy == root_row {
        let (w, h) = g.grid;
        let (sx, sy) = (sip % w, sip / w);
        match g.topology {
            SipTopology::Ring1d => pass_around(tl, a, &mut buf, g.sip_count(), Dir::E),
            SipTopology::Torus2d => {
                pass_around(tl, a, &mut buf, w, Dir::E);
                pass_around(tl, a, &mut buf, h, Dir::S);
            }
            SipTopology::Mesh2dNoWrap => {
                chain(tl, a, &mut buf, sx, w, Dir::E);
                chain(tl, a, &mut buf, sy, h, Dir::S);
            }
        }
    }
    // Phases 4-5: down the root column, then along every row.
    if cx == root_col {
        line_broadcast(tl, &mut buf, cy, ch, root_row, (Dir::S, Dir::N));
    }
    line_broadcast(tl, &mut buf, cx, cw, root_col, (Dir::E, Dir::W));
    buf.store(tl, &all);
}

impl Algorithm for HierRoot {
    fn name(&self) -> &'static str {
        "hier_root"
    }
    fn summary(&self) -> &'static str {
        "centre-root row/column reduce over the cube mesh, inter-SIP exchange on the root cube, broadcast back"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[Collective::AllReduce]
    }
    /// N/S/E/W between pe0s of neighbouring cubes (no wrap), and global_*
    /// from every cube's pe0 to the same cube of each neighbouring SIP.
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let (cw, ch) = g.cubes;
        let mut out = Vec::new();
        for sip in 0..g.sip_count() {
            for cube in 0..g.cubes_per_sip() {
                let (cx, cy) = (cube % cw, cube / cw);
                let mut entries = Vec::new();
                for d in Dir::ALL {
                    let peer = match d {
                        Dir::E => (cx + 1 < cw).then(|| cube + 1),
                        Dir::W => (cx > 0).then(|| cube - 1),
                        Dir::S => (cy + 1 < ch).then(|| cube + cw),
                        Dir::N => (cy > 0).then(|| cube - cw),
                    };
                    if let Some(pc) = peer {
                        let peer_pe = g.pe(g.participant(sip, pc));
                        entries.push(q.entry(mesh_dir(d), peer_pe, mesh_dir(d.opposite())));
                    }
                    if let Some(ps) = grid_neighbor(g.topology, g.grid, sip, d) {
                        let peer_pe = g.pe(g.participant(ps, cube));
                        entries.push(q.entry(global_dir(d), peer_pe, global_dir(d.opposite())));
                    }
                }
                out.push((g.pe(g.participant(sip, cube)), entries));
            }
        }
        out
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, _c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // Phases 1, 2, 4 and 5 cross the cube mesh (none with one cube);
        // phase 3 sends the whole buffer once per other SIP of each line of
        // a ring or torus, and reduces then broadcasts it along each line of
        // a mesh, whose chains are staggered by position (their closing hops
        // are longer than the others). Its steps run in loops.
        let cubes = f64::from(g.cubes_per_sip());
        let (w, h) = (f64::from(g.grid.0), f64::from(g.grid.1));
        let mesh = g.topology == SipTopology::Mesh2dNoWrap;
        let lines = if mesh {
            2.0 * (f64::from(u8::from(w > 1.0)) + f64::from(u8::from(h > 1.0)))
        } else {
            w - 1.0 + h - 1.0
        };
        let (sends, bytes_per_send) = (if cubes > 1.0 { 4.0 } else { 0.0 } + lines.max(1.0), bytes);
        CostTerms {
            sends,
            bytes_per_send,
            stages: 1,
            lockstep: if mesh { 1.0 } else { participants(g) },
            register_pieces: 1.0,
            programs: HeldPrograms::Looped {
                programs: 1.0,
                ops_per_chunk: 3.0 * 64.0,
            },
            fanout: 1.0,
            in_flight: InFlight::Messages(12.0),
        }
    }
}
