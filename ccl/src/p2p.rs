//! Point-to-point transfers between PEs, the layer under a process group's
//! `send`/`recv`, `scatter`, `gather`, uneven `all_to_all` and `barrier`.
//!
//! A [`Links`] is a communicator of its own: one bidirectional queue pair
//! per linked pair of PEs, in a scope of its own (installed once, reused by
//! every transfer over the same pairs). A PE knows its peers, sorted by PE
//! index, as channels `chan0, chan1, …`.
//!
//! A transfer is a list of [`Move`]s: contiguous runs of f16 elements from
//! one PE's memory to another's (or within one PE: a copy). Every move is
//! cut into pieces of one slot each, and each PE runs its moves round by
//! round: it sends piece `j` of every move it sends, then receives piece `j`
//! of every move it receives (the next round's pieces are loaded while
//! this round's are sent, and a round's received pieces are stored after
//! the next round's sends). A piece holds one slot, so a queue always has
//! room for a piece its receiver has not reached yet, and rounds never
//! deadlock. Both ends of a queue take its moves in list order.
//!
//! A dissemination barrier ([`Links::barrier_programs`]) sends a one-element
//! token `⌈log2 n⌉` rounds: in round k member m sends to m + 2^k and waits
//! for m − 2^k, forwarding what it received.

use crate::error::CclError;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::kernel::{Addr, DType, Tile, Tl};
use kernbench_runtime::machine::{Machine, Tables};
use kernbench_spec::topology::address::Space;
use kernbench_systems::PeIdx;
use kernbench_systems::ipcq::Scope;
use kernbench_systems::program::{Launch, QDir};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One end of a move: a PE and an offset in a memory it addresses locally
/// (its own TCM, its cube's SRAM or HBM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub pe: PeIdx,
    pub space: Space,
    pub offset: u64,
}

impl End {
    fn addr(&self) -> Addr {
        Addr::Local(self.space, self.offset)
    }
}

/// `elems` contiguous f16 elements copied from `from` to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub from: End,
    pub to: End,
    pub elems: usize,
}

/// Most peers a PE may have in one [`Links`]: a channel number is a u8.
pub const MAX_PEERS: usize = 256;

/// The pairs of distinct PEs `moves` cross, each once, smaller PE first:
/// the key of the [`Links`] that carries them.
pub fn pairs_of(moves: &[Move]) -> Vec<(PeIdx, PeIdx)> {
    let mut pairs: Vec<(PeIdx, PeIdx)> = moves
        .iter()
        .filter(|m| m.from.pe != m.to.pe)
        .map(|m| (m.from.pe.min(m.to.pe), m.from.pe.max(m.to.pe)))
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

/// Queue pairs between linked PEs, in a scope of their own.
#[derive(Debug, Clone)]
pub struct Links {
    pub scope: Scope,
    /// Each PE's peers, sorted: peer `i` is channel `i`.
    peers: Arc<BTreeMap<PeIdx, Vec<PeIdx>>>,
}

impl Links {
    /// Opens scope `name` over `pairs` and places its slot areas (no
    /// simulated time); the tables must still land ([`Machine::land_scope`]).
    pub fn prepare(
        machine: &mut Machine,
        q: QueueConfig,
        pairs: &[(PeIdx, PeIdx)],
        name: &str,
    ) -> Result<(Self, Tables), CclError> {
        let mut peers: BTreeMap<PeIdx, Vec<PeIdx>> = BTreeMap::new();
        for &(a, b) in pairs {
            peers.entry(a).or_default().push(b);
            peers.entry(b).or_default().push(a);
        }
        for (pe, list) in &mut peers {
            list.sort();
            list.dedup();
            if list.len() > MAX_PEERS {
                return Err(CclError::Config(format!(
                    "communicator '{name}': PE {pe} would have {} peers; a PE has at most {MAX_PEERS} (one channel each, numbered by a byte); allowed: fewer ranks in one transfer",
                    list.len()
                )));
            }
        }
        let links = Self {
            scope: machine.open_scope(name),
            peers: Arc::new(peers),
        };
        let tables: Tables = links
            .peers
            .iter()
            .map(|(&pe, list)| {
                let entries = list
                    .iter()
                    .map(|&peer| q.entry(links.chan(pe, peer), peer, links.chan(peer, pe)))
                    .collect();
                (pe, entries)
            })
            .collect();
        let tables = machine.place_scope(links.scope, tables)?;
        Ok((links, tables))
    }

    /// The channel on which `pe` reaches `peer` (both linked).
    fn chan(&self, pe: PeIdx, peer: PeIdx) -> QDir {
        let i = self.peers[&pe]
            .binary_search(&peer)
            .expect("a move's PEs are linked");
        QDir::Chan(i as u8)
    }

    /// The programs of a transfer, per PE that moves something, with pieces
    /// of at most `piece_elems` elements (one slot).
    pub fn programs(
        &self,
        machine: &Machine,
        moves: &[Move],
        piece_elems: usize,
    ) -> Result<Vec<(PeIdx, Launch)>, CclError> {
        let mut plans: BTreeMap<PeIdx, PePlan> = BTreeMap::new();
        for m in moves.iter().filter(|m| m.elems > 0) {
            if m.from.pe == m.to.pe {
                let plan = plans.entry(m.from.pe).or_default();
                plan.copies.push((m.from.addr(), m.to.addr(), m.elems));
                continue;
            }
            let send = (self.chan(m.from.pe, m.to.pe), m.from.addr(), m.elems);
            plans.entry(m.from.pe).or_default().sends.push(send);
            let recv = (self.chan(m.to.pe, m.from.pe), m.to.addr(), m.elems);
            plans.entry(m.to.pe).or_default().recvs.push(recv);
        }
        let mut out = Vec::new();
        for (pe, mut plan) in plans {
            plan.piece = piece_elems.max(1);
            out.extend(machine.trace(move_kernel, &plan, &[pe])?);
        }
        Ok(out)
    }

    /// The programs of a dissemination barrier over `members` (one PE each,
    /// in group order), which must be linked as [`barrier_pairs`] says; the
    /// token is read from offset 0 of `token` on each member.
    pub fn barrier_programs(
        &self,
        machine: &Machine,
        members: &[PeIdx],
        token: Space,
    ) -> Result<Vec<(PeIdx, Launch)>, CclError> {
        let n = members.len();
        let mut out = Vec::new();
        for (m, &pe) in members.iter().enumerate() {
            let rounds = dissemination(n)
                .map(|d| {
                    let (to, from) = (members[(m + d) % n], members[(m + n - d) % n]);
                    (self.chan(pe, to), self.chan(pe, from))
                })
                .collect();
            let plan = BarrierPlan { token, rounds };
            out.extend(machine.trace(barrier_kernel, &plan, &[pe])?);
        }
        Ok(out)
    }
}

/// The distances of a dissemination barrier's rounds over `n` members:
/// 1, 2, 4, … below `n` (`⌈log2 n⌉` rounds).
pub fn dissemination(n: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(1usize), |d| d.checked_mul(2)).take_while(move |&d| d < n)
}

/// The pairs a dissemination barrier over `members` links.
pub fn barrier_pairs(members: &[PeIdx]) -> Vec<(PeIdx, PeIdx)> {
    let n = members.len();
    let mut pairs: Vec<(PeIdx, PeIdx)> = dissemination(n)
        .flat_map(|d| {
            (0..n).map(move |m| {
                let (a, b) = (members[m], members[(m + d) % n]);
                (a.min(b), a.max(b))
            })
        })
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

/// What one PE does in a transfer: (channel, address, elements) of each
/// move it sends or receives, and its local copies, in move order.
#[derive(Debug, Default)]
struct PePlan {
    sends: Vec<(QDir, Addr, usize)>,
    recvs: Vec<(QDir, Addr, usize)>,
    copies: Vec<(Addr, Addr, usize)>,
    piece: usize,
}

/// Piece `j` of a move of `elems` at `at` with pieces of `piece`: its
/// address and length, if it has one.
fn piece_of(at: Addr, elems: usize, piece: usize, j: usize) -> Option<(Addr, usize)> {
    let first = j.checked_mul(piece).filter(|&f| f < elems)?;
    Some((at.plus(first as u64 * 2), piece.min(elems - first)))
}

/// The rounds of [`PePlan`]: loads one round ahead of the sends; stores a
/// round's received pieces after the next round's sends.
fn move_kernel(tl: &mut Tl, plan: &PePlan) {
    let pieces = |&(_, _, e): &(QDir, Addr, usize)| e.div_ceil(plan.piece);
    let rounds = plan
        .sends
        .iter()
        .chain(&plan.recvs)
        .map(pieces)
        .chain(plan.copies.iter().map(|c| c.2.div_ceil(plan.piece)))
        .max()
        .unwrap_or(0);
    let load_round = |tl: &mut Tl, j: usize| -> Vec<(QDir, Tile)> {
        plan.sends
            .iter()
            .filter_map(|&(dir, at, e)| {
                let (at, len) = piece_of(at, e, plan.piece, j)?;
                Some((dir, tl.load(at, len)))
            })
            .collect()
    };
    let mut loaded = load_round(tl, 0);
    let mut got: Vec<(Addr, Tile)> = Vec::new();
    for j in 0..rounds {
        let next = if j + 1 < rounds {
            load_round(tl, j + 1)
        } else {
            Vec::new()
        };
        for (dir, t) in std::mem::replace(&mut loaded, next) {
            tl.send(dir, t);
        }
        for (at, t) in got.drain(..) {
            tl.store(at, t);
        }
        for &(from, to, e) in &plan.copies {
            if let (Some((from, len)), Some((to, _))) = (
                piece_of(from, e, plan.piece, j),
                piece_of(to, e, plan.piece, j),
            ) {
                let t = tl.load(from, len);
                tl.store(to, t);
            }
        }
        for &(dir, at, e) in &plan.recvs {
            if let Some((at, len)) = piece_of(at, e, plan.piece, j) {
                got.push((at, tl.recv(dir, &[len], DType::F16)));
            }
        }
    }
    for (at, t) in got {
        tl.store(at, t);
    }
}

/// One barrier member: where its token is read from, and per round the
/// channel it sends on and the one it waits on.
#[derive(Debug)]
struct BarrierPlan {
    token: Space,
    rounds: Vec<(QDir, QDir)>,
}

/// Reads the token, then per round sends it on and takes the one that comes.
fn barrier_kernel(tl: &mut Tl, plan: &BarrierPlan) {
    if plan.rounds.is_empty() {
        return;
    }
    let mut token = tl.load(Addr::Local(plan.token, 0), 1);
    for &(to, from) in &plan.rounds {
        tl.send(to, token);
        token = tl.recv(from, &[1], DType::F16);
    }
}
