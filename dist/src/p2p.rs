//! Point-to-point calls and the calls built on them: `send`/`recv` between
//! two ranks, `scatter`/`gather` from any root, `all_to_all_single` with
//! uneven splits, and a `barrier` that costs a dissemination round.
//!
//! Each is a transfer of the tensors' rows ([`kernbench_ccl::p2p`]): moves
//! between the shards' PEs over queues of their own, a communicator per
//! set of linked PEs, installed by the first transfer over them and reused.
//! A send and a recv match in order per (source, destination) pair: the
//! k-th send from s to d meets the k-th recv on d from s; the second of the
//! two submits the transfer at the later of both clocks, and both resume at
//! its end. [`Rank::post`] joins a pair without waiting and returns the
//! work both ends wait on, so an asynchronous form is `post` now and
//! [`Rank::wait_transfer`] later. Group calls join the group's epoch like a
//! collective; the last member to join submits. A recv whose send never
//! comes leaves the scheduler with nothing to run: it reports the wait,
//! naming both ranks ([`Sched::p2p_waits`]).

use super::DistError;
use super::barrier::Call;
use super::group::{GroupId, ProcessGroup, RankUnit};
use super::rank::Rank;
use super::spawn::{Sched, Status, Submission, WorkState};
use super::tensor::Tensor;
use super::work::{Work, WorkKind};
use kernbench_ccl::CclError;
use kernbench_ccl::p2p::{End, Links, Move, barrier_pairs, pairs_of};
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_runtime::machine::{InstallError, LaunchReport, Machine, Tables};
use kernbench_spec::topology::address::Space;
use kernbench_systems::ipcq::Scope;
use kernbench_systems::program::Launch;
use kernbench_systems::{PeIdx, Tick};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Which end of a point-to-point message a rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Send,
    Recv,
}

/// A call some rank made that waits for its partners.
#[derive(Debug, Clone)]
struct Posted {
    rank: u32,
    work: u64,
    /// The tensor sent or received; for all_to_all_single, the input then
    /// the output.
    tensors: Vec<Tensor>,
    /// all_to_all_single's input and output split sizes, in rows.
    splits: [Vec<usize>; 2],
    /// A message end's predecessor on its rank's communication stream.
    after: Option<(u64, u32)>,
}

/// The messages from one rank to another: those posted and not yet
/// matched, and how many were matched before them.
#[derive(Debug, Default)]
struct Pair {
    matched: u64,
    sends: VecDeque<Posted>,
    recvs: VecDeque<Posted>,
}

/// A queue's buffer memory, slots and slot size.
type LinkQueues = (Space, u32, u64);

/// The process group's point-to-point state: installed links, unmatched
/// messages, and the tensors of group calls whose members are joining.
#[derive(Debug, Default)]
pub(crate) struct P2p {
    /// By their PE pairs and queue shape (a barrier's slots hold a token).
    links: BTreeMap<(Vec<(PeIdx, PeIdx)>, LinkQueues), Links>,
    pairs: BTreeMap<(u32, u32), Pair>,
    calls: BTreeMap<u64, Vec<Posted>>,
}

impl P2p {
    /// Forgets every unmatched message and half-joined call (after a
    /// failed spawn); installed links stay.
    pub(crate) fn reset(&mut self) {
        self.pairs.clear();
        self.calls.clear();
    }
}

impl ProcessGroup {
    /// The links over `pairs`: installed ones, or new ones prepared here
    /// whose tables land when their first transfer leaves the host.
    fn links_for(
        &mut self,
        pairs: Vec<(PeIdx, PeIdx)>,
        name: &str,
        q: QueueConfig,
        busy: &BTreeSet<Scope>,
    ) -> Result<(Links, Option<Tables>), DistError> {
        let key = (pairs, (q.buffer, q.n_slots, q.slot_size));
        if let Some(links) = self.p2p.links.get(&key) {
            return Ok((links.clone(), None));
        }
        loop {
            match Links::prepare(&mut self.machine, q, &key.0, name) {
                Ok((links, tables)) => {
                    self.p2p.links.insert(key, links.clone());
                    return Ok((links, Some(tables)));
                }
                Err(CclError::Install(InstallError::Memory(e))) => {
                    // Under auto, the tuner's picks make room, least recently used first.
                    if !self.release_least_used_pick(None, busy)? {
                        return Err(CclError::Install(InstallError::Memory(e)).into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The index of the shard of `t` holding row `row` with columns `cols`,
/// preferring one on (cube, pe) `near` (a replica on the receiver's PE).
fn shard_with(t: &Tensor, row: usize, cols: (usize, usize), near: (u32, u32)) -> Option<usize> {
    let holds = |s: &super::tensor::Shard| {
        s.block.cols == cols && (s.block.rows.0..s.block.rows.0 + s.block.rows.1).contains(&row)
    };
    let mut found = t.shards.iter().enumerate().filter(|(_, s)| holds(s));
    let first = found.next()?.0;
    Some(
        t.shards
            .iter()
            .position(|s| holds(s) && (s.cube, s.pe) == near)
            .unwrap_or(first),
    )
}

/// The moves copying `count` rows of `from` starting at row `first` into
/// `to` from row `at`: every shard of `to` (each replica) gets its part from
/// the shard of `from` with the same columns (on the same PE if any).
fn row_moves(
    m: &Machine,
    from: &Tensor,
    (first, count): (usize, usize),
    to: &Tensor,
    at: usize,
) -> Result<Vec<Move>, String> {
    let end = |t: &Tensor, s: &super::tensor::Shard, row: usize| End {
        pe: m.pe_index(s.sip, s.cube, s.pe),
        space: t.space,
        offset: s.addr + ((row - s.block.rows.0) * s.block.cols.1 * 2) as u64,
    };
    let mut moves = Vec::new();
    for d in &to.shards {
        let (lo, hi) = (
            d.block.rows.0.max(at),
            (d.block.rows.0 + d.block.rows.1).min(at + count),
        );
        let mut row = lo;
        while row < hi {
            let src_row = row - at + first;
            let Some(k) = shard_with(from, src_row, d.block.cols, (d.cube, d.pe)) else {
                return Err(format!(
                    "rank {}'s {}x{} tensor has no shard holding row {src_row} with columns {}..{} together, as rank {}'s does on cube {} pe {}; allowed: tensors split the same way across columns on both ranks (the same DPPolicy)",
                    from.rank,
                    from.shape.0,
                    from.shape.1,
                    d.block.cols.0,
                    d.block.cols.0 + d.block.cols.1,
                    to.rank,
                    d.cube,
                    d.pe
                ));
            };
            let s = &from.shards[k];
            let rows = (s.block.rows.0 + s.block.rows.1 - src_row).min(hi - row);
            moves.push(Move {
                from: end(from, s, src_row),
                to: end(to, d, row),
                elems: rows * d.block.cols.1,
            });
            row += rows;
        }
    }
    Ok(moves)
}

/// A launch ready for the scheduler: its scope, the tables to land first
/// (links used for the first time), and its programs.
type Ready = (Scope, Option<Tables>, Vec<(PeIdx, Launch)>);

/// The launch of the transfer `moves`, on the links over their PE pairs
/// (named `name` when installed here): nothing, when nothing moves.
fn transfer(g: &mut Sched, moves: &[Move], name: &str, q: QueueConfig) -> Result<Ready, DistError> {
    if moves.iter().all(|m| m.elems == 0) {
        return Ok((Scope::DEFAULT, None, Vec::new()));
    }
    let busy = g.busy_scopes();
    let (links, install) = g.pg.links_for(pairs_of(moves), name, q, &busy)?;
    // One slot per piece: a queue always has room for the next one.
    let piece = (q.slot_size / 2).max(1) as usize;
    let programs = links.programs(&g.pg.machine, moves, piece)?;
    Ok((links.scope, install, programs))
}

/// Hands `launch` to the scheduler as work `work` of `rank` (whose count
/// orders it among submissions of the same tick), leaving the host at `at`.
/// An empty launch finishes as soon as the engine sees it.
fn submit(
    g: &mut Sched,
    (scope, install, programs): Ready,
    (rank, at, work): (u32, Tick, u64),
    (members, after): (Vec<u32>, Vec<(u64, u32)>),
) {
    g.works.insert(work, WorkState::Pending);
    let seq = g.seq[rank as usize];
    g.pending.push(Submission {
        at,
        rank,
        seq,
        work,
        programs,
        scope,
        install,
        members,
        after,
    });
}

/// Hands a group call's launch to the scheduler as work `work` of the
/// group's ranks, leaving the host at the latest member clock.
fn submit_to_group(g: &mut Sched, launch: Ready, group: GroupId, work: u64) {
    let ranks = g.pg.group(group).ranks.clone();
    let at = g.latest_clock(group.0);
    submit(g, launch, (ranks[0], at, work), (ranks, Vec::new()));
}

impl Sched<'_> {
    /// What every unmatched message waits for: lines naming the rank that
    /// waits, the message, and where its partner is.
    pub(super) fn p2p_waits(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (&(src, dst), pair) in &self.pg.p2p.pairs {
            let unmatched = pair
                .sends
                .iter()
                .map(|p| (p, "send to", dst, "recv from", src))
                .chain(
                    pair.recvs
                        .iter()
                        .map(|p| (p, "recv from", src, "send to", dst)),
                );
            for (k, (p, what, peer, lacks, lacks_peer)) in unmatched.enumerate() {
                let partner = match &self.status[peer as usize] {
                    Status::Finished(_) => format!("rank {peer} has finished"),
                    _ => format!("rank {peer} waits elsewhere"),
                };
                out.push(format!(
                    "rank {} waits in {what} rank {peer} ({} B, message #{} from rank {src} to rank {dst}), but {partner} without its matching {lacks} rank {lacks_peer}",
                    p.rank,
                    tensor_bytes(&p.tensors[0]),
                    pair.matched + k as u64,
                ));
            }
        }
        out
    }
}

/// A rank passes only tensors it allocated: another rank's shards live on
/// that rank's device.
/// A transfer moves f16 tensors only ([`Tensor::check_f16`]).
fn own_tensor(what: &str, rank: u32, t: &Tensor) -> Result<(), DistError> {
    if t.rank == rank {
        return t.check_f16(what).map_err(DistError::Config);
    }
    Err(DistError::Config(format!(
        "{what} on rank {rank} with a {}x{} tensor of rank {}: a rank moves only its own tensors; allowed: a tensor this rank allocated (ctx.empty)",
        t.shape.0, t.shape.1, t.rank
    )))
}

fn tensor_bytes(t: &Tensor) -> u64 {
    t.nbytes()
}

impl Rank<'_, '_> {
    /// `dist.send(tensor, dst)`: sends `t` to rank `dst`, which receives it
    /// with [`Rank::recv`]; returns when the message has landed (the two
    /// ranks' clocks both move to its end). Blocking, as torch's: ranks that
    /// send to each other in a cycle must order their calls (even ranks send
    /// first, odd ranks receive first).
    pub fn send(&mut self, t: &Tensor, dst: u32) -> Result<LaunchReport, DistError> {
        let w = self.isend(t, dst)?;
        self.wait(&w).map(|r| LaunchReport {
            start: r.start,
            end: r.end,
        })
    }

    /// `dist.recv(tensor, src)`: receives into `t` what rank `src` sends
    /// (the same shape and column split); returns when it has landed.
    pub fn recv(&mut self, t: &Tensor, src: u32) -> Result<LaunchReport, DistError> {
        let w = self.irecv(t, src)?;
        self.wait(&w).map(|r| LaunchReport {
            start: r.start,
            end: r.end,
        })
    }

    /// `dist.isend(tensor, dst)`: posts the send and returns at once;
    /// [`Rank::wait`] gives when the message ran. The message leaves once
    /// both ends are posted, after the work each end's current
    /// communication stream held then (as torch's NCCL backend, which sends
    /// on a stream of the peer pair); later work on that stream does not
    /// wait for it. A PE runs one launch at a time, so messages sharing a
    /// PE run one after another, in the order they were matched.
    pub fn isend(&mut self, t: &Tensor, dst: u32) -> Result<Work, DistError> {
        self.post(Side::Send, t, dst)
    }

    /// `dist.irecv(tensor, src)`: posts the receive and returns at once.
    pub fn irecv(&mut self, t: &Tensor, src: u32) -> Result<Work, DistError> {
        self.post(Side::Recv, t, src)
    }

    /// Posts this rank's end of a message to or from `peer` without
    /// waiting, after the work on its current communication stream: returns
    /// the work both ends wait on. The second end to
    /// post submits the transfer.
    fn post(&mut self, side: Side, t: &Tensor, peer: u32) -> Result<Work, DistError> {
        let mut g = self.enter()?;
        let (me, n) = (self.rank, g.pg.world_size);
        let call = match side {
            Side::Send => "send",
            Side::Recv => "recv",
        };
        own_tensor(call, me, t)?;
        if peer >= n || peer == me {
            return Err(DistError::Config(format!(
                "{call} of rank {me} with rank {peer}: the peer must be another rank of the world's 0..{n}; allowed: a rank below {n} other than {me}"
            )));
        }
        g.seq[me as usize] += 1;
        let (stream, seq) = (g.current[me as usize][1], g.seq[me as usize]);
        let (src, dst) = match side {
            Side::Send => (me, peer),
            Side::Recv => (peer, me),
        };
        let pair = g.pg.p2p.pairs.entry((src, dst)).or_default();
        let partner = match side {
            Side::Send => pair.recvs.pop_front(),
            Side::Recv => pair.sends.pop_front(),
        };
        let work = match &partner {
            Some(p) => p.work,
            None => g.new_work(WorkState::Gathering),
        };
        // As torch's NCCL sends on a stream of each peer pair: the message
        // waits for the work put on the current stream before it, but does
        // not hold back what comes after (else a ring of isends would wait
        // on itself). On the PEs, transfers queue in hand-over order.
        let after = g.tails[me as usize].get(&stream.id).map(|&w| (w, me));
        g.unwaited.entry(work).or_default().push(me);
        let handle = Work {
            id: work,
            rank: me,
            kind: WorkKind::Transfer { what: call },
            stream,
            seq,
        };
        g.note(handle);
        let Some(partner) = partner else {
            let posted = Posted {
                rank: me,
                work,
                tensors: vec![t.clone()],
                splits: Default::default(),
                after,
            };
            let pair = g.pg.p2p.pairs.entry((src, dst)).or_default();
            match side {
                Side::Send => pair.sends.push_back(posted),
                Side::Recv => pair.recvs.push_back(posted),
            }
            return Ok(handle);
        };
        let pair = g.pg.p2p.pairs.entry((src, dst)).or_default();
        let message = pair.matched;
        pair.matched += 1;
        let (sent, received) = match side {
            Side::Send => (t, &partner.tensors[0]),
            Side::Recv => (&partner.tensors[0], t),
        };
        if sent.shape != received.shape {
            return Err(DistError::Collective(format!(
                "message #{message} from rank {src} to rank {dst}: rank {src} sends a {}x{} tensor but rank {dst} receives into a {}x{} one; allowed: the same shape on both ends",
                sent.shape.0, sent.shape.1, received.shape.0, received.shape.1
            )));
        }
        let moves =
            row_moves(&g.pg.machine, sent, (0, sent.shape.0), received, 0).map_err(|e| {
                DistError::Layout(format!(
                    "message #{message} from rank {src} to rank {dst}: {e}"
                ))
            })?;
        let name = format!("p2p[{src}, {dst}]");
        let q = g.pg.config.queues();
        let launch = transfer(&mut g, &moves, &name, q)?;
        let at = g.host[src as usize].max(g.host[dst as usize]);
        let after = after.into_iter().chain(partner.after).collect();
        submit(&mut g, launch, (src, at, work), (vec![src, dst], after));
        Ok(handle)
    }
}

/// A group call built on transfers: what every member passes.
struct GroupCall<'t> {
    group: GroupId,
    what: &'static str,
    /// The root's world rank (scatter, gather).
    root: Option<u32>,
    /// What every member must pass alike: the tensor's bytes, or 0 where
    /// members' sizes differ (all_to_all_single's blocks).
    bytes: u64,
    tensors: Vec<&'t Tensor>,
    splits: [Vec<usize>; 2],
}

/// Turns the members' calls (in group order) into moves.
type Build<'b> = &'b dyn Fn(&Machine, &[Posted]) -> Result<Vec<Move>, DistError>;

impl Rank<'_, '_> {
    /// Joins the group's next epoch with `call`; the last member to join
    /// builds the transfer from every member's tensors and submits it at
    /// the latest member clock. Returns when it has run.
    fn group_transfer(&mut self, call: GroupCall, build: Build) -> Result<LaunchReport, DistError> {
        for t in &call.tensors {
            own_tensor(call.what, self.rank, t)?;
        }
        let mut g = self.enter()?;
        let epoch = Call {
            what: call.what,
            bytes: call.bytes,
            op: "",
            root: call.root,
            base: 0,
            pe_stride: 0,
        };
        let joined = g.join_epoch(call.group.0, self.rank, epoch)?;
        let posted = Posted {
            rank: self.rank,
            work: joined.work,
            tensors: call.tensors.into_iter().cloned().collect(),
            splits: call.splits,
            after: None,
        };
        g.pg.p2p.calls.entry(joined.work).or_default().push(posted);
        if joined.complete {
            let mut posted = g.pg.p2p.calls.remove(&joined.work).unwrap_or_default();
            let ranks = g.pg.group(call.group).ranks.clone();
            posted.sort_by_key(|p| ranks.iter().position(|&r| r == p.rank));
            let moves = build(&g.pg.machine, &posted)?;
            let name = format!("{}{ranks:?}", call.what);
            let q = g.pg.config.queues();
            let launch = transfer(&mut g, &moves, &name, q)?;
            submit_to_group(&mut g, launch, call.group, joined.work);
        }
        let (_g, r) = Sched::wait_for(self.shared, g, self.rank, joined.work);
        r
    }

    /// The group's ranks and the place of world rank `root` among them.
    fn member_of(
        &self,
        group: GroupId,
        what: &str,
        root: u32,
    ) -> Result<(Vec<u32>, usize, String), DistError> {
        let g = self.enter()?;
        let rg = g.pg.group(group);
        let at = rg.ranks.iter().position(|&r| r == root).ok_or_else(|| {
            DistError::Config(format!(
                "{what} root {root} is not a rank of group '{}' (ranks {:?}); allowed: one of its ranks",
                rg.name, rg.ranks
            ))
        })?;
        Ok((rg.ranks.clone(), at, rg.name.clone()))
    }

    /// The rows of `t` as one equal block per member of a group of `n`.
    fn block_rows(what: &str, t: &Tensor, n: usize, group: &str) -> Result<usize, DistError> {
        let rows = t.shape.0;
        if !rows.is_multiple_of(n) {
            let below = rows / n * n;
            let near = if below == 0 {
                format!("{n}")
            } else {
                format!("{below} or {}", below + n)
            };
            return Err(DistError::Config(format!(
                "{what} of rank {}'s {}x{} tensor over group '{group}' of {n} ranks: its rows are one equal block per rank; allowed: rows a multiple of {n} (e.g. {near})",
                t.rank, rows, t.shape.1
            )));
        }
        Ok(rows / n)
    }

    /// `dist.scatter` in place: the root's tensor holds one block of rows
    /// per member of `group` (in group order); member i's block i becomes
    /// the root's block i, and the rest of its tensor is left as it was.
    /// `root` is a world rank in the group; every member names the same.
    pub fn scatter(
        &mut self,
        group: GroupId,
        t: &Tensor,
        root: u32,
    ) -> Result<LaunchReport, DistError> {
        self.root_blocks(group, t, root, true)
    }

    /// `dist.gather` in place: member i's block i of rows (of one equal
    /// block per member) becomes block i of the root's tensor.
    pub fn gather(
        &mut self,
        group: GroupId,
        t: &Tensor,
        root: u32,
    ) -> Result<LaunchReport, DistError> {
        self.root_blocks(group, t, root, false)
    }

    /// Scatter (the root's block i to member i) or gather (member i's
    /// block i to the root's), as one group transfer.
    fn root_blocks(
        &mut self,
        group: GroupId,
        t: &Tensor,
        root: u32,
        scatter: bool,
    ) -> Result<LaunchReport, DistError> {
        let what = if scatter { "scatter" } else { "gather" };
        let (ranks, at, name) = self.member_of(group, what, root)?;
        let block = Self::block_rows(what, t, ranks.len(), &name)?;
        let build = |m: &Machine, posted: &[Posted]| {
            let root_t = same_shapes(what, posted, at)?;
            let mut moves = Vec::new();
            for (i, p) in posted.iter().enumerate().filter(|(i, _)| *i != at) {
                let rows = (i * block, block);
                let (from, to) = if scatter {
                    (root_t, &p.tensors[0])
                } else {
                    (&p.tensors[0], root_t)
                };
                moves.extend(row_moves(m, from, rows, to, rows.0).map_err(DistError::Layout)?);
            }
            Ok(moves)
        };
        let call = GroupCall {
            group,
            what,
            root: Some(root),
            bytes: tensor_bytes(t),
            tensors: vec![t],
            splits: Default::default(),
        };
        self.group_transfer(call, &build)
    }

    /// `dist.barrier(group)`: every member waits for every other, through
    /// a dissemination barrier on the machine: `⌈log2 n⌉` rounds of a
    /// one-element token between the members' first PEs (docs/model.md
    /// §Kernels, *Barrier*). Returns the tick every member leaves at.
    pub fn barrier(&mut self, group: GroupId) -> Result<Tick, DistError> {
        let mut g = self.enter()?;
        let call = Call {
            what: "barrier",
            bytes: 0,
            op: "",
            root: None,
            base: 0,
            pe_stride: 0,
        };
        let joined = g.join_epoch(group.0, self.rank, call)?;
        if joined.complete {
            let ranks = g.pg.group(group).ranks.clone();
            let members: Vec<PeIdx> = ranks.iter().map(|&r| first_pe(&g, r)).collect();
            let launch = if members.len() < 2 {
                (Scope::DEFAULT, None, Vec::new())
            } else {
                // A slot holds the token: one f16.
                let q = QueueConfig {
                    buffer: g.pg.config.buffer_kind,
                    n_slots: 1,
                    slot_size: 2,
                };
                let name = format!("barrier{ranks:?}");
                let busy = g.busy_scopes();
                let (links, install) = g.pg.links_for(barrier_pairs(&members), &name, q, &busy)?;
                let programs = links.barrier_programs(&g.pg.machine, &members, Space::Hbm)?;
                (links.scope, install, programs)
            };
            submit_to_group(&mut g, launch, group, joined.work);
        }
        let (g, r) = Sched::wait_for(self.shared, g, self.rank, joined.work);
        r?;
        Ok(g.host[self.rank as usize])
    }
}

/// Rank `r`'s first PE: pe0 of cube 0 of its device (its PE in the rank =
/// flat PE mode).
fn first_pe(g: &Sched, r: u32) -> PeIdx {
    let device = g.device[r as usize];
    match g.pg.unit {
        RankUnit::Sip => g.pg.machine.pe_index(device, 0, 0),
        RankUnit::Pe => PeIdx(device),
    }
}

/// The root's tensor, once every member's has its shape.
fn same_shapes<'p>(what: &str, posted: &'p [Posted], root: usize) -> Result<&'p Tensor, DistError> {
    let want = &posted[root].tensors[0];
    if let Some(p) = posted.iter().find(|p| p.tensors[0].shape != want.shape) {
        return Err(DistError::Collective(format!(
            "{what}: rank {}'s tensor is {}x{} but the root rank {}'s is {}x{}; allowed: the same shape on every rank",
            p.rank,
            p.tensors[0].shape.0,
            p.tensors[0].shape.1,
            want.rank,
            want.shape.0,
            want.shape.1
        )));
    }
    Ok(want)
}

impl Rank<'_, '_> {
    /// `dist.all_to_all_single(output, input, output_split_sizes,
    /// input_split_sizes)` over `group`: member r's input rows are cut into
    /// blocks by `input_splits` (None: equal blocks), block j going to member
    /// j; member j's output holds the blocks it receives in member order, cut
    /// by its `output_splits`. Member r's `input_splits[j]` must equal member
    /// j's `output_splits[r]`. Both tensors have the same columns and differ.
    pub fn all_to_all_single(
        &mut self,
        group: GroupId,
        output: &Tensor,
        input: &Tensor,
        output_splits: Option<&[usize]>,
        input_splits: Option<&[usize]>,
    ) -> Result<LaunchReport, DistError> {
        let (n, name) = {
            let g = self.enter()?;
            let rg = g.pg.group(group);
            (rg.ranks.len(), rg.name.clone())
        };
        if input.shape.1 != output.shape.1 || input == output {
            return Err(DistError::Config(format!(
                "all_to_all_single on rank {}: the input ({}x{}) and output ({}x{}) must be two tensors with the same columns; allowed: an output allocated apart from the input, {} columns wide",
                self.rank,
                input.shape.0,
                input.shape.1,
                output.shape.0,
                output.shape.1,
                input.shape.1
            )));
        }
        let splits = [
            splits_of("input_split_sizes", input_splits, input, n, &name)?,
            splits_of("output_split_sizes", output_splits, output, n, &name)?,
        ];
        let build = |m: &Machine, posted: &[Posted]| {
            let mut moves = Vec::new();
            for (r, from) in posted.iter().enumerate() {
                for (j, to) in posted.iter().enumerate() {
                    let (count, want) = (from.splits[0][j], to.splits[1][r]);
                    if count != want {
                        return Err(DistError::Collective(format!(
                            "all_to_all_single over group '{name}': rank {} sends {count} rows to rank {} (its input_split_sizes[{j}]) but rank {} expects {want} rows from rank {} (its output_split_sizes[{r}]); allowed: each rank's input_split_sizes[j] equal to rank j's output_split_sizes at the sender's place",
                            from.rank, to.rank, to.rank, from.rank
                        )));
                    }
                    let first = from.splits[0][..j].iter().sum();
                    let at = to.splits[1][..r].iter().sum();
                    let rows = row_moves(m, &from.tensors[0], (first, count), &to.tensors[1], at)
                        .map_err(DistError::Layout)?;
                    moves.extend(rows);
                }
            }
            Ok(moves)
        };
        let call = GroupCall {
            group,
            what: "all_to_all_single",
            root: None,
            bytes: 0,
            tensors: vec![input, output],
            splits,
        };
        self.group_transfer(call, &build)
    }
}

/// A tensor's split sizes (rows per member): as given, which must be one
/// per member summing to its rows, or equal blocks.
fn splits_of(
    field: &str,
    given: Option<&[usize]>,
    t: &Tensor,
    n: usize,
    group: &str,
) -> Result<Vec<usize>, DistError> {
    let rows = t.shape.0;
    let Some(given) = given else {
        if !rows.is_multiple_of(n) {
            return Err(DistError::Config(format!(
                "all_to_all_single without {field} cuts rank {}'s {rows} rows into {n} equal blocks (group '{group}'); allowed: rows a multiple of {n}, or {field} giving each rank's rows",
                t.rank
            )));
        }
        return Ok(vec![rows / n; n]);
    };
    let sum: usize = given.iter().sum();
    if given.len() != n || sum != rows {
        return Err(DistError::Config(format!(
            "all_to_all_single: {field} {given:?} of rank {} has {} entries summing to {sum} rows; allowed: one entry per rank of group '{group}' ({n}) summing to the tensor's {rows} rows",
            t.rank,
            given.len()
        )));
    }
    Ok(given.to_vec())
}
