//! `bruck`: all-to-all in `⌈log2 n⌉` steps (Bruck et al. 1997), for small
//! blocks where pairwise's `⌊n/2⌋` latencies dominate. Participant `p` holds
//! its blocks rotated — slot `i` is block `p + i`, bound for `p + i` — and
//! at step `k` sends every slot whose index has bit `k` set to `p + 2^k`,
//! receiving the same slots from `p − 2^k`. A slot's data thus moves `i`
//! places in all, to its destination, where slot `i` then holds the block
//! of `p − i`, stored as block `p − i`. Each step moves about half the
//! buffer, so it sends `⌈log2 n⌉/2` buffers where pairwise sends one.

use super::primitives::{levels, me};
use crate::cost::{CostTerms, HeldPrograms, InFlight, log2_levels, participants};
use crate::kernels::Buffer;
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::kernel::{Index, Part, Sym, Tile, Tl};
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

pub struct Bruck;

/// Step `k` sends on channel `2k` (to `p + 2^k`) and receives on channel
/// `2k + 1` (from `p − 2^k`).
fn send_chan(k: usize) -> QDir {
    QDir::Chan((2 * k) as u8)
}

fn recv_chan(k: usize) -> QDir {
    QDir::Chan((2 * k + 1) as u8)
}

/// The step that last wrote slot `i` before step `k` (None: still the loaded
/// block).
fn last_written(i: usize, k: usize) -> Option<usize> {
    (0..k).rev().find(|&b| i & (1 << b) != 0)
}

/// The slots step `k` sends, those received longest ago first, so a send
/// that waits for data just arriving holds up as few others as possible.
fn slots_of_step(n: usize, k: usize) -> Vec<usize> {
    let mut slots: Vec<usize> = (1..n).filter(|i| i & (1 << k) != 0).collect();
    slots.sort_by_key(|&i| (last_written(i, k).map_or(0, |b| b + 1), i));
    slots
}

/// The part of piece `c` of original block `me + off`.
fn piece(buf: &Buffer, me: Sym, off: Sym, c: usize) -> Part {
    buf.part(&crate::kernels::Atom(vec![
        Index::At(me + off),
        Index::from(c),
    ]))
}

/// Stores slot `i`'s pieces as original block `p − i`.
fn store_slot(tl: &mut Tl, buf: &Buffer, me: Sym, n: usize, slot: &[Tile], i: usize) {
    for (c, &t) in slot.iter().enumerate() {
        tl.store_part(&piece(buf, me, Sym::from(n - i), c), t);
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let n = a.group.size();
    let p = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let me = tl.param(p as i64);
    let pieces = a.pieces(a.job.elems / n, 1);
    let buf = Buffer::new(a.buffer(tl), a.job.elems, &[n, pieces]);
    // Slot i: block p + i (slot 0, the own block, stays in place).
    let mut slots: Vec<Vec<Tile>> = vec![Vec::new(); n];
    for (i, slot) in slots.iter_mut().enumerate().skip(1) {
        *slot = (0..pieces)
            .map(|c| tl.load_part(&piece(&buf, me, Sym::from(i), c)))
            .collect();
    }
    let mut done_before: Vec<usize> = Vec::new();
    for k in 0..levels(n) {
        for &i in &slots_of_step(n, k) {
            for (c, tile) in slots[i].iter_mut().enumerate() {
                tl.send(send_chan(k), *tile);
                let part = piece(&buf, me, Sym::from(n - i), c);
                *tile = tl.recv_part(recv_chan(k), &part);
            }
        }
        // Slots final after the previous step are stored now, behind this
        // step's transfers, so the stores overlap them.
        for &i in &done_before {
            store_slot(tl, &buf, me, n, &slots[i], i);
        }
        done_before = (1..n).filter(|&i| levels(i + 1) == k + 1).collect();
    }
    for &i in &done_before {
        store_slot(tl, &buf, me, n, &slots[i], i);
    }
}

impl Algorithm for Bruck {
    fn name(&self) -> &'static str {
        "bruck"
    }
    fn summary(&self) -> &'static str {
        "all-to-all in ⌈log2 n⌉ steps of about half the buffer (Bruck): latency-optimal for small blocks"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[Collective::AllToAll]
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let n = g.size();
        g.wire_each(|p| {
            (0..levels(n))
                .flat_map(|k| {
                    let d = (1 << k) % n;
                    [
                        q.entry(send_chan(k), g.pe((p + d) % n), recv_chan(k)),
                        q.entry(recv_chan(k), g.pe((p + n - d) % n), send_chan(k)),
                    ]
                })
                .collect()
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, _c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // A block to one peer per send, about half of them per step; every
        // participant holds every block, and all share one unrolled program.
        let p = participants(g);
        let (sends, bytes_per_send) = (log2_levels(g) * (p / 2.0).ceil(), bytes / p);
        CostTerms {
            sends,
            bytes_per_send,
            stages: 1,
            lockstep: p,
            register_pieces: g.size() as f64 / 4.0,
            programs: HeldPrograms::Unrolled { programs: 1.0 },
            fanout: 1.0,
            // The first steps' blocks load before any receive.
            in_flight: InFlight::Sends(sends / 2.0),
        }
    }
}
