//! `dbtree`: a double binary tree (NCCL's). Two binary trees over the
//! participants carry half of the buffer each; a participant that is a leaf
//! in one is interior in the other, so each does one tree's combining and
//! forwarding and the links of both trees are busy at once. Pieces pipeline
//! up (reduce) and down (broadcast).
//!
//! Tree 0 is NCCL's btree rooted at participant 0: the parent of `r` clears
//! its lowest set bit `b` and sets `2b` (or only clears `b` when that is out
//! of range); its children are `r ∓ b/2` (the upper one halved until it is
//! in range). Odd participants are its leaves. Tree 1 is the same btree
//! over participants `1..n` shifted by one (label `j` is participant
//! `j + 1`), hung below participant 0, so its leaves are the even
//! participants and both trees root at 0 — which broadcast and reduce need
//! (NCCL, all-reduce only, mirrors the tree instead and saves that level).
//!
//! A participant waits on one receive at a time, so its program takes the
//! pieces of both trees, up and down, in the order they reach it: piece `i`
//! of a tree is ready to go up `h + i` piece times after the leaves start
//! (`h`: its subtree's height, a level lasting a hop), and comes down at
//! `H + d + i` (`H`: the tree's height, `d`: its depth); ties go to tree 0,
//! then up before down. Every dependency between participants runs from an
//! earlier time to a strictly later one, so no chain of waits closes a
//! cycle. A piece a participant only receives (a leaf's) is stored at the
//! end, where waiting for it holds nothing else up.

use super::primitives::{levels, me};
use crate::cost::{CostTerms, HeldPrograms, InFlight, log2_levels};
use crate::kernels::{Atom, Buffer, combine};
use crate::{Algorithm, Collective, Group, KernelArgs};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::kernel::{Index, Tile, Tl};
use kernbench_systems::ipcq::Tables;
use kernbench_systems::program::QDir;

pub struct DbTree;

/// A participant's place in one tree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeLinks {
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

/// NCCL's btree over `n` ranks rooted at 0 (`ncclGetBtree`): rank `r`'s node.
fn btree(n: usize, r: usize) -> TreeLinks {
    if r == 0 {
        // The root's one child: the highest power of two below n.
        let children = (n > 1)
            .then(|| 1 << (usize::BITS - 1 - (n - 1).leading_zeros()))
            .into_iter()
            .collect();
        return TreeLinks {
            parent: None,
            children,
        };
    }
    let bit = r & r.wrapping_neg();
    let up = (r ^ bit) | (bit << 1);
    let parent = Some(if up < n { up } else { r ^ bit });
    let low = bit >> 1;
    let mut children = Vec::new();
    if low > 0 {
        children.push(r - low);
        let mut lb = low;
        while lb > 0 && r + lb >= n {
            lb >>= 1;
        }
        if lb > 0 {
            children.push(r + lb);
        }
    }
    TreeLinks { parent, children }
}

/// Participant `p`'s node in tree `t` (0 or 1) of `n`.
pub fn node(n: usize, t: usize, p: usize) -> TreeLinks {
    if t == 0 {
        return btree(n, p);
    }
    if p == 0 {
        let children = (n > 1).then_some(1).into_iter().collect();
        return TreeLinks {
            parent: None,
            children,
        };
    }
    let b = btree(n - 1, p - 1);
    TreeLinks {
        parent: Some(b.parent.map_or(0, |q| q + 1)),
        children: b.children.iter().map(|c| c + 1).collect(),
    }
}

/// Levels below `p` in tree `t` (0 for a leaf), in O(1): in a btree, rank
/// `r`'s lower child `r − b/2` (`b` its lowest set bit) heads a complete
/// subtree, so `r` has `log2 b` levels below it.
fn height(n: usize, t: usize, p: usize) -> usize {
    let btree = |n: usize, r: usize| match r {
        0 => levels(n),
        r => r.trailing_zeros() as usize,
    };
    match (t, p) {
        (0, p) => btree(n, p),
        (_, 0) => usize::from(n > 1) + levels(n.saturating_sub(1)),
        (_, p) => btree(n - 1, p - 1),
    }
}

/// Levels above `p` in tree `t` (0 for the root).
fn depth(n: usize, t: usize, mut p: usize) -> usize {
    let mut d = 0;
    while let Some(q) = node(n, t, p).parent {
        p = q;
        d += 1;
    }
    d
}

/// Tree `t`'s channel to the parent (`None`) or to child `k`.
fn chan(t: usize, child: Option<usize>) -> QDir {
    QDir::Chan((3 * t + child.map_or(0, |k| k + 1)) as u8)
}

/// One piece of one tree going up (reduce) or coming down (broadcast) at
/// this participant, at its predicted time.
#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    down: bool,
    tree: usize,
    piece: usize,
}

/// This participant's events in the order the pieces reach it.
fn schedule(a: &KernelArgs, p: usize, pieces: usize, hop: f64) -> Vec<Event> {
    let n = a.group.size();
    let c = a.job.collective;
    let (up, down) = (c != Collective::Broadcast, c != Collective::Reduce);
    let mut events = Vec::new();
    for tree in 0..2 {
        let h = height(n, tree, p) as f64;
        // The root's height is the tree's; only a broadcast starts at the root.
        let d = depth(n, tree, p) as f64 + if up { height(n, tree, 0) as f64 } else { 0.0 };
        for piece in 0..pieces {
            let i = piece as f64;
            for (wanted, is_down, at) in [(up, false, h), (down, true, d)] {
                if wanted {
                    events.push(Event {
                        time: at * hop + i,
                        down: is_down,
                        tree,
                        piece,
                    });
                }
            }
        }
    }
    events.sort_by(|x, y| {
        x.time
            .total_cmp(&y.time)
            .then(x.tree.cmp(&y.tree))
            .then(x.down.cmp(&y.down))
    });
    events
}

/// Piece `i` of tree `t` going up: combine the children's, send to the parent.
fn up(tl: &mut Tl, a: &KernelArgs, buf: &mut Buffer, me: &[TreeLinks; 2], (t, i): (usize, usize)) {
    let atom = Atom(vec![Index::from(t), Index::from(i)]);
    let mut acc = buf.tile(&atom);
    for k in 0..me[t].children.len() {
        let x = tl.recv_part(chan(t, Some(k)), &buf.part(&atom));
        acc = combine(tl, a.job.op, acc, x);
    }
    match me[t].parent {
        Some(_) => tl.send(chan(t, None), acc),
        None if a.job.collective == Collective::Reduce => tl.store_part(&buf.part(&atom), acc),
        None => buf.set(&atom, acc),
    }
}

/// Piece `i` of tree `t` coming down: take it from the parent (the root
/// has it), pass it to the children, store it (a broadcast's root has it
/// stored already). A leaf's store, which would wait for the piece, joins
/// `later` instead, so it holds up none of the pieces that come sooner.
fn down(
    tl: &mut Tl,
    a: &KernelArgs,
    buf: &mut Buffer,
    me: &[TreeLinks; 2],
    (t, i): (usize, usize),
    later: &mut Vec<(Atom, Tile)>,
) {
    let atom = Atom(vec![Index::from(t), Index::from(i)]);
    let x = match me[t].parent {
        Some(_) => tl.recv_part(chan(t, None), &buf.part(&atom)),
        None => buf.tile(&atom),
    };
    for k in 0..me[t].children.len() {
        tl.send(chan(t, Some(k)), x);
    }
    if me[t].parent.is_none() && a.job.collective == Collective::Broadcast {
        return;
    }
    if me[t].children.is_empty() {
        later.push((atom, x));
    } else {
        tl.store_part(&buf.part(&atom), x);
    }
}

fn kernel(tl: &mut Tl, a: &KernelArgs) {
    let n = a.group.size();
    let p = me(tl, &a.group);
    if n == 1 {
        return;
    }
    let c = a.job.collective;
    let stages =
        (height(n, 0, 0).max(height(n, 1, 0))) * if c == Collective::AllReduce { 2 } else { 1 };
    let half = a.job.elems.div_ceil(2);
    // The two trees' edges cross links in opposite directions.
    let pieces = a.crossing_pieces(half, stages);
    let mut buf = Buffer::new(a.buffer(tl), a.job.elems, &[2, pieces]);
    if c != Collective::Broadcast || p == 0 {
        buf.load(tl, &buf.atoms(&[]));
    }
    let hop = a
        .piece_limits
        .hop_in_pieces(2 * half.div_ceil(pieces) as u64);
    let me = [node(n, 0, p), node(n, 1, p)];
    let mut later = Vec::new();
    for e in schedule(a, p, pieces, hop) {
        if e.down {
            down(tl, a, &mut buf, &me, (e.tree, e.piece), &mut later);
        } else {
            up(tl, a, &mut buf, &me, (e.tree, e.piece));
        }
    }
    for (atom, x) in later {
        tl.store_part(&buf.part(&atom), x);
    }
}

impl Algorithm for DbTree {
    fn name(&self) -> &'static str {
        "dbtree"
    }
    fn summary(&self) -> &'static str {
        "double binary tree: half the buffer on each of two trees whose leaves are the other's interior, pipelined"
    }
    fn collectives(&self) -> &'static [Collective] {
        &[
            Collective::AllReduce,
            Collective::Reduce,
            Collective::Broadcast,
        ]
    }
    fn wiring(&self, g: &Group, q: &QueueConfig) -> Tables {
        let n = g.size();
        g.wire_each(|p| {
            let mut e = Vec::new();
            for t in 0..2 {
                let me = node(n, t, p);
                if let Some(up) = me.parent {
                    let k = node(n, t, up).children.iter().position(|&c| c == p);
                    e.push(q.entry(chan(t, None), g.pe(up), chan(t, k)));
                }
                for (k, &c) in me.children.iter().enumerate() {
                    e.push(q.entry(chan(t, Some(k)), g.pe(c), chan(t, None)));
                }
            }
            e
        })
    }
    fn kernel(&self) -> fn(&mut Tl, &KernelArgs) {
        kernel
    }
    fn cost_terms(&self, g: &Group, c: Collective, bytes: f64, _max_piece: f64) -> CostTerms {
        // Each tree's n − 1 links carry its half once each way: about one
        // send per participant, tree and direction; up one tree (a level
        // deeper than tree) and, for all-reduce, down, staggered by depth.
        let all_reduce = c == Collective::AllReduce;
        let up = log2_levels(g) as usize + 1;
        let (sends, bytes_per_send) = if all_reduce {
            (4.0, bytes / 2.0)
        } else {
            (2.0, bytes / 2.0)
        };
        CostTerms {
            sends,
            bytes_per_send,
            stages: if all_reduce { 2 * up } else { up },
            lockstep: 1.0,
            register_pieces: 1.0,
            programs: HeldPrograms::Unrolled {
                programs: g.size() as f64,
            },
            fanout: 1.0,
            in_flight: InFlight::Sends(2.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both trees span every participant from root 0, parents and children
    /// agree, no node has more than two children, and from 3 participants
    /// on every participant but 0 is interior in exactly one tree.
    #[test]
    fn two_binary_trees_whose_leaves_are_each_others_interior() {
        for n in 1..80 {
            for t in 0..2 {
                assert_eq!(node(n, t, 0).parent, None, "n={n} t={t}");
                let mut seen = vec![false; n];
                let mut stack = vec![0];
                while let Some(p) = stack.pop() {
                    assert!(!seen[p], "n={n} t={t}: {p} twice");
                    seen[p] = true;
                    let me = node(n, t, p);
                    assert!(me.children.len() <= 2, "n={n} t={t}: {p} {me:?}");
                    for &c in &me.children {
                        assert!(c < n, "n={n} t={t}: child {c} of {p}");
                        assert_eq!(node(n, t, c).parent, Some(p), "n={n} t={t}: {c}");
                        stack.push(c);
                    }
                }
                assert!(seen.iter().all(|&s| s), "n={n} t={t}: {seen:?}");
            }
            for p in (1..n).filter(|_| n >= 3) {
                let interior = (0..2).filter(|&t| !node(n, t, p).children.is_empty());
                assert_eq!(interior.count(), 1, "n={n}: participant {p}");
            }
        }
        // NCCL's picture of 14 ranks: 0 → 8 → {4, 12}, 12 → {10, 13}.
        assert_eq!(btree(14, 0).children, [8]);
        assert_eq!(btree(14, 8).children, [4, 12]);
        assert_eq!(btree(14, 12).children, [10, 13]);
        assert_eq!(btree(14, 13).parent, Some(12));
        assert_eq!((height(14, 0, 0), height(14, 1, 0)), (4, 5));
    }

    /// The O(1) heights agree with counting the levels.
    #[test]
    fn heights_count_the_levels_below() {
        fn levels(n: usize, t: usize, p: usize) -> usize {
            let below = node(n, t, p).children.into_iter();
            below.map(|c| levels(n, t, c) + 1).max().unwrap_or(0)
        }
        for n in 1..130 {
            for t in 0..2 {
                for p in 0..n {
                    assert_eq!(height(n, t, p), levels(n, t, p), "n={n} t={t} p={p}");
                }
            }
        }
    }
}
