//! Pipelined chains: a [`Chain`] of participants a part of the buffer streams
//! down piece by piece (broadcast, reduce, the trees), and [`run_chains`],
//! which runs several through one participant in the order their pieces
//! reach it, loading its own pieces ahead.

use super::buffer::{Atom, Buffer, combine};
use crate::ReduceOp;
use kernbench_runtime::kernel::{Index, Part, Sym, Tile, Tl};
use kernbench_systems::program::QDir;
use std::collections::VecDeque;
use std::ops::Range;

/// One pipelined chain through this participant: the part of the buffer under
/// `prefix`, cut into pieces and sent down the chain as a stream (piece 0
/// first, or the last piece first when `reversed`), arriving on `from`
/// (None: this participant is the head) and leaving on `to` (None: the tail)
/// and, in a broadcast tree, on every one of `branches` too.
#[derive(Debug, Clone)]
pub struct Chain {
    pub prefix: Vec<Index>,
    pub from: Option<QDir>,
    pub to: Option<QDir>,
    pub branches: Vec<QDir>,
    /// When the stream's first piece reaches this participant, in piece times
    /// after the head sends it (its distance from the head).
    pub offset: usize,
    /// How many pieces of the stream reach this participant (its first `take`):
    /// all of them, unless two chains carry the same part from opposite
    /// ends and meet.
    pub take: usize,
    /// How many of those (the first) it passes on to `to` and `branches`.
    pub forward: usize,
    /// The stream runs from the part's last piece to its first.
    pub reversed: bool,
    /// Whether a reduce takes this participant's own piece in here (loaded and
    /// combined, or loaded and sent by the head). False only where a root
    /// that heads a chain gets the result back at its end: it stores what
    /// it receives. Broadcasts ignore it (the head loads).
    pub adds_own: bool,
}

impl Chain {
    /// A chain whose every piece, in order, passes through this participant and
    /// on down the chain (a tail has nothing to pass on).
    pub fn whole(
        prefix: Vec<Index>,
        from: Option<QDir>,
        to: Option<QDir>,
        offset: usize,
        pieces: usize,
    ) -> Chain {
        Chain {
            prefix,
            from,
            to,
            branches: Vec::new(),
            offset,
            take: pieces,
            forward: pieces,
            reversed: false,
            adds_own: true,
        }
    }

    /// Whether this participant handles a piece of the chain at step `t`.
    fn active(&self, t: usize) -> bool {
        (self.offset..self.offset + self.take).contains(&t)
    }

    /// Whether the piece this participant handles at step `t` goes on.
    fn forwards(&self, t: usize) -> bool {
        t < self.offset + self.forward
    }

    /// The piece of the part at stream position `s` (s counts from 0 at
    /// this participant's offset).
    fn piece(&self, s: Sym, pieces: usize) -> Sym {
        if self.reversed { -s + (pieces - 1) } else { s }
    }
}

/// What the chains do with each piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainKind {
    /// The head loads and sends; the others receive, forward and store.
    Broadcast,
    /// Every participant loads its piece; the others receive and combine it in
    /// before forwarding; the tail stores the result.
    Reduce(ReduceOp),
}

/// Runs `chains` (whose parts are cut into `pieces` each) through this
/// participant, piece by piece, in the order the pieces reach it (stream
/// position s of a chain at its offset + s): a PE waits on one receive at
/// a time, so a chain whose pieces come later must never hold back one
/// whose pieces come sooner. Between the steps where a chain starts,
/// stops forwarding or ends, every step does the same, and those steps run
/// as loops.
///
/// The pieces a participant loads from its buffer (a broadcast head's, every
/// reduce participant's own) are loaded [`LOAD_AHEAD`] steps ahead, so a step
/// never waits for the memory's latency: loaded only when needed, a head
/// sending from HBM is bound by one load latency per piece, not by its
/// links.
pub fn run_chains(tl: &mut Tl, buf: &Buffer, kind: ChainKind, chains: &[Chain], pieces: usize) {
    let run = ChainRun {
        buf,
        kind,
        chains,
        pieces,
    };
    let mut cuts: Vec<usize> = chains
        .iter()
        .flat_map(|c| {
            [
                c.offset,
                c.offset + c.forward.min(c.take),
                c.offset + c.take,
            ]
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let (Some(&start), Some(&end)) = (cuts.first(), cuts.last()) else {
        return;
    };
    let mut ahead: VecDeque<Vec<Option<Tile>>> = (start..start + LOAD_AHEAD)
        .map(|t| run.prefetch(tl, t))
        .collect();
    for w in cuts.windows(2) {
        run.segment(tl, w[0]..w[1], &mut ahead);
    }
    debug_assert!(end == start || ahead.iter().flatten().all(Option::is_none));
}

/// How many steps ahead [`run_chains`] loads a participant's own pieces: two
/// cover an HBM load's latency plus both chains' loads at the port for
/// pieces down to a few KiB (docs/model.md §Pipelining).
pub const LOAD_AHEAD: usize = 2;

/// What [`run_chains`] runs, shared by its steps.
struct ChainRun<'a> {
    buf: &'a Buffer,
    kind: ChainKind,
    chains: &'a [Chain],
    pieces: usize,
}

impl ChainRun<'_> {
    /// Piece of chain `c` at step `t0 + step`, where `step` may be symbolic.
    fn part(&self, c: &Chain, t0: usize, step: Sym) -> Part {
        let s = step + (t0 as i64 - c.offset as i64);
        chain_part(self.buf, c, c.piece(s, self.pieces))
    }

    /// Piece of chain `c` at step `t`, traced as it is.
    fn part_at(&self, c: &Chain, t: usize) -> Part {
        self.part(c, t, Sym::from(0usize))
    }

    /// The loads of step `t`: one per loading chain with a piece then.
    fn prefetch(&self, tl: &mut Tl, t: usize) -> Vec<Option<Tile>> {
        self.chains
            .iter()
            .map(|c| (self.kind.loads(c) && c.active(t)).then(|| tl.load_part(&self.part_at(c, t))))
            .collect()
    }

    /// Step `t` traced as it is, with its loads taken from `ahead`.
    fn unrolled(&self, tl: &mut Tl, t: usize, ahead: &mut VecDeque<Vec<Option<Tile>>>) {
        let mine = ahead.pop_front().unwrap_or_default();
        ahead.push_back(self.prefetch(tl, t + LOAD_AHEAD));
        for (c, mine) in self.chains.iter().zip(mine) {
            if c.active(t) {
                run_piece(tl, self.kind, c, &self.part_at(c, t), c.forwards(t), mine);
            }
        }
    }

    /// Steps `ts`, over which every chain is active or not throughout and
    /// forwards or not throughout: while the look-ahead stays inside them,
    /// blocks of LOAD_AHEAD steps are one loop whose iteration carries the
    /// loaded pieces of the next block.
    fn segment(&self, tl: &mut Tl, ts: Range<usize>, ahead: &mut VecDeque<Vec<Option<Tile>>>) {
        if !self.chains.iter().any(|c| c.active(ts.start)) {
            // No chain has a piece here: a step traces only the look-ahead's
            // loads, none until the last LOAD_AHEAD steps. Tiny pieces make
            // the chain offsets millions of steps long; skipping to those
            // steps keeps tracing linear in the pieces, not the offsets.
            for t in ts.end.saturating_sub(LOAD_AHEAD).max(ts.start)..ts.end {
                self.unrolled(tl, t, ahead);
            }
            return;
        }
        let blocks = ts.len().saturating_sub(LOAD_AHEAD) / LOAD_AHEAD;
        if blocks < 2 {
            for t in ts {
                self.unrolled(tl, t, ahead);
            }
            return;
        }
        let t0 = ts.start;
        let live: Vec<&Chain> = self.chains.iter().filter(|c| c.active(t0)).collect();
        let loading: Vec<&Chain> = live
            .iter()
            .copied()
            .filter(|c| self.kind.loads(c))
            .collect();
        let carried: Vec<Tile> = ahead.drain(..).flatten().flatten().collect();
        let block = LOAD_AHEAD as i64;
        let after = tl.repeat(blocks, &carried, |tl, s, cur| {
            let mut next = Vec::new();
            let mut cur = cur.iter();
            for j in 0..LOAD_AHEAD {
                let step = |ahead: usize| s * block + (j + ahead) as i64;
                for c in &loading {
                    next.push(tl.load_part(&self.part(c, t0, step(LOAD_AHEAD))));
                }
                for c in &live {
                    let mine = if self.kind.loads(c) {
                        cur.next().copied()
                    } else {
                        None
                    };
                    let part = self.part(c, t0, step(0));
                    run_piece(tl, self.kind, c, &part, c.forwards(t0), mine);
                }
            }
            next
        });
        // The loop's last loads, back in `ahead`'s per-chain form.
        let mut after = after.into_iter();
        for _ in 0..LOAD_AHEAD {
            let step = self
                .chains
                .iter()
                .map(|c| {
                    (c.active(t0) && self.kind.loads(c))
                        .then(|| after.next())
                        .flatten()
                })
                .collect();
            ahead.push_back(step);
        }
        for t in t0 + blocks * LOAD_AHEAD..ts.end {
            self.unrolled(tl, t, ahead);
        }
    }
}

impl ChainKind {
    /// Whether a participant loads its piece of `c` from its buffer.
    fn loads(self, c: &Chain) -> bool {
        match self {
            ChainKind::Broadcast => c.from.is_none(),
            ChainKind::Reduce(_) => c.adds_own,
        }
    }
}

/// Piece `piece` of a chain's part of the buffer.
fn chain_part(buf: &Buffer, c: &Chain, piece: Sym) -> Part {
    let mut digits = c.prefix.clone();
    digits.push(Index::At(piece));
    buf.part(&Atom(digits))
}

/// One piece (`part`) of one chain at this participant, passed on down the
/// chain when `forwards`; `mine` is the piece loaded from this participant's
/// buffer, when it loads one.
fn run_piece(
    tl: &mut Tl,
    kind: ChainKind,
    c: &Chain,
    part: &Part,
    forwards: bool,
    mine: Option<Tile>,
) {
    let mut mine = || mine.unwrap_or_else(|| tl.load_part(part));
    let t = match (kind, c.from) {
        (ChainKind::Broadcast, None) | (ChainKind::Reduce(_), None) => mine(),
        (ChainKind::Broadcast, Some(from)) => tl.recv_part(from, part),
        (ChainKind::Reduce(_), Some(from)) if !c.adds_own => tl.recv_part(from, part),
        (ChainKind::Reduce(op), Some(from)) => {
            let mine = mine();
            let x = tl.recv_part(from, part);
            combine(tl, op, mine, x)
        }
    };
    if forwards {
        for &to in c.to.iter().chain(&c.branches) {
            tl.send(to, t);
        }
    }
    let stores = match kind {
        ChainKind::Broadcast => c.from.is_some(),
        ChainKind::Reduce(_) => c.to.is_none(),
    };
    if stores {
        tl.store_part(part, t);
    }
}
