//! hier_lanes' reduce-scatter and all-gather when the buffer splits evenly
//! over the participants: participant p = (y·w + x)·c + cube holds block p,
//! and the blocks nest as rows, then SIPs of a row, then cubes of a SIP.
//! So the levels run outermost digit first — the lane ring along each
//! column (rows' blocks), then along each row (SIPs' blocks), then the cube
//! ring (cubes' blocks) — and every ring block of every level is one
//! contiguous range, sent in slot-sized pieces: a participant sends
//! `O(steps · pieces)` messages however many participants there are, where
//! the participant-first cut of [`super::blocks`] sends a piece of every
//! participant block of its level at each step. The all-gather runs the
//! levels back, cube ring first.
//!
//! Each level runs its ring both ways at once, half of every block each
//! way, in its own cut of the buffer; a level hands the block it owns to
//! the next through memory (stored in one cut, loaded in the next). The
//! lane rings carry about the whole buffer (the cube ring first would carry
//! it over UCIe instead), the price of blocks that stay contiguous.

use super::Coords;
use super::blocks::{Level, lanes_take_the_snake, on_snake};
use super::levels::slot_pieces;
use crate::kernels::{Buffer, Keep, RingJob, all_gather, reduce_scatter};
use crate::{Collective, Group, KernelArgs};
use kernbench_runtime::kernel::{Index, Tl};
use kernbench_systems::program::QDir;

/// Bytes of a participant block, per SIP of the grid, up to which the
/// nested cut runs (when the buffer splits evenly): the participant-first
/// cut sends a piece of every SIP's blocks at each step, so its messages
/// outweigh the nested cut's extra lane traffic while blocks are small
/// against the SIP count. Measured in flow mode on tori of 4×4 cubes per
/// SIP (reduce-scatter, in place): 16 SIPs at 1 MiB (4 KiB blocks) 10.2 µs
/// nested against 14.5 µs, at 4 MiB 33.9 against 26.8; 64 SIPs at 4 MiB
/// 29.8 against 56.7, at 16 MiB 109 against 103, at 64 MiB 438 against 294;
/// 256 SIPs at 64 MiB 392 against 409; 4 SIPs at 256 KiB 5.4 against 3.8.
const BLOCK_BYTES_PER_SIP: usize = 256;

/// Whether `g`'s reduce-scatter or all-gather of `elems` runs over the
/// nested cut: every participant block has the same number of elements,
/// and blocks are small against the SIP count ([`BLOCK_BYTES_PER_SIP`]).
pub(super) fn chosen(g: &Group, elems: usize) -> bool {
    let p = g.size();
    elems.is_multiple_of(p) && 2 * elems / p <= BLOCK_BYTES_PER_SIP * g.sip_count() as usize
}

/// Sends per participant of the nested levels and the mean bytes of each:
/// level k's ring sends both ways for n_k − 1 steps, each a half block of
/// S / (2 · n_1 ⋯ n_k).
pub(super) fn sends(g: &Group, bytes: f64) -> (f64, f64) {
    let (w, h) = (g.grid.0 as usize, g.grid.1 as usize);
    let mut lengths = if lanes_take_the_snake(g) {
        vec![w * h]
    } else {
        vec![h, w]
    };
    lengths.push(g.cubes_per_sip() as usize);
    let (mut sends, mut moved, mut blocks) = (0.0, 0.0, 1.0);
    for n in lengths.into_iter().filter(|&n| n > 1) {
        blocks *= n as f64;
        let steps = 2.0 * (n as f64 - 1.0);
        sends += steps;
        moved += steps * bytes / (2.0 * blocks);
    }
    (sends.max(1.0), moved / sends.max(1.0))
}

/// One level: its ring's length, this participant's position on it and its
/// digit there (the block it ends up owning), the queues to its next and
/// previous neighbours, and the digit of the participant at each position.
struct Nest {
    name: &'static str,
    n: usize,
    pos: usize,
    own: usize,
    dirs: (QDir, QDir),
    digits: Vec<usize>,
}

/// The levels, outermost digit first; levels of one participant are left out.
fn nests(a: &KernelArgs, at: &Coords) -> Vec<Nest> {
    let g = &a.group;
    let (w, h) = (g.grid.0 as usize, g.grid.1 as usize);
    let sip = at.sy * w + at.sx;
    let mut out = Vec::new();
    if let Some((order, pos, dirs)) = on_snake(g, at) {
        out.push(Nest {
            name: "nested snake",
            n: order.len(),
            pos,
            own: sip,
            dirs,
            digits: order.iter().map(|&s| s as usize).collect(),
        });
    } else {
        let line = |name, n: usize, pos, dirs| Nest {
            name,
            n,
            pos,
            own: pos,
            dirs,
            digits: (0..n).collect(),
        };
        out.push(line(
            "nested columns",
            h,
            at.sy,
            (QDir::GlobalS, QDir::GlobalN),
        ));
        out.push(line(
            "nested rows",
            w,
            at.sx,
            (QDir::GlobalE, QDir::GlobalW),
        ));
    }
    out.push(Nest {
        name: "nested cube ring",
        n: at.order.len(),
        pos: at.pos,
        own: at.cube,
        dirs: (QDir::IntraE, QDir::IntraW),
        digits: at.order.iter().map(|&c| c as usize).collect(),
    });
    out.retain(|l| l.n > 1);
    out
}

/// The buffer cut down to the blocks of `nests` (radices outermost first),
/// each in two halves (the ring's two ways), each half in slot pieces.
fn cut(tl: &mut Tl, a: &KernelArgs, radices: &[usize]) -> Buffer {
    let blocks = 2 * radices.iter().product::<usize>();
    let mut all = radices.to_vec();
    all.extend([2, slot_pieces(a, a.job.elems / blocks)]);
    Buffer::new(a.buffer(tl), a.job.elems, &all)
}

/// Level `l`'s ring both ways, inside the block `prefix` of the levels
/// before; `shift` 1 for reduce-scatter (a ring leaves its participant
/// with ring block `me + 1`), 0 for all-gather (it starts from `me`).
fn level_jobs(tl: &mut Tl, l: &Nest, prefix: &[Index], shift: usize) -> Vec<RingJob> {
    let digit = |_: usize, _: usize, m: usize| l.digits[m];
    let level = Level::new(l.name, l.n, l.dirs, (1, 1), &digit);
    (0..2)
        .map(|d| RingJob {
            prefix: prefix.to_vec(),
            ..level.way(tl, l.pos, 0, d, shift).job(0, vec![d.into()])
        })
        .collect()
}

/// Reduce-scatter or all-gather of this participant over the nested cut.
pub(super) fn kernel(tl: &mut Tl, a: &KernelArgs, at: &Coords) {
    let nests = nests(a, at);
    let owns: Vec<Index> = nests
        .iter()
        .map(|l| tl.param(l.own as i64).into())
        .collect();
    let radices: Vec<usize> = nests.iter().map(|l| l.n).collect();
    if a.job.collective == Collective::ReduceScatter {
        for (k, l) in nests.iter().enumerate() {
            let mut buf = cut(tl, a, &radices[..=k]);
            let jobs = level_jobs(tl, l, &owns[..k], 1);
            reduce_scatter(tl, a.job.op, &mut buf, &jobs);
            buf.store(tl, &buf.atoms(&owns[..=k]));
        }
        return;
    }
    let keep = Keep {
        own: false,
        received: true,
        reuse: false,
    };
    for (k, l) in nests.iter().enumerate().rev() {
        let mut buf = cut(tl, a, &radices[..=k]);
        let jobs = level_jobs(tl, l, &owns[..k], 0);
        let own: Vec<_> = jobs.iter().map(|j| j.ring.me).collect();
        all_gather(tl, &mut buf, &jobs, &own, keep);
    }
}
