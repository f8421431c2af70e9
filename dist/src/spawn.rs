//! `spawn`: one worker thread per rank, run one at a
//! time by a cooperative scheduler, so a program gives the same clock and
//! the same data whatever the OS does.
//!
//! A worker runs until it must wait: for a launch or a collective it
//! submitted (`Rank::wait`, or a blocking collective). Only when every
//! worker waits does the scheduler move the simulation: it hands the engine
//! every submission the ordering rules allow (`order`: a stream runs in
//! order, a PE receives a rank's work in the rank's order), runs it until
//! some awaited work finishes, handing over held-back submissions as their
//! stream's previous work ends, and resumes that work's waiters, their host
//! clocks at its end tick. Work that ranks submit before they wait
//! therefore overlaps on the one simulated clock.

use super::DistError;
use super::group::{ProcessGroup, TurnOrder};
use super::work::{Stream, StreamKind};
use kernbench_runtime::machine::{LaunchHandle, LaunchReport};
use kernbench_systems::PeIdx;
use kernbench_systems::Tick;
use kernbench_systems::ipcq::Scope;
use kernbench_systems::program::Launch;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Stack of each worker thread: room for kernels traced inside it.
pub(crate) const WORKER_STACK: usize = 1 << 20;

/// A launch a worker submitted: kernels or a collective, by work id.
pub(super) struct Submission {
    pub at: Tick,
    /// With `seq`, an order that does not depend on turn order: the
    /// launching rank, or a collective's lowest member rank.
    pub rank: u32,
    /// That rank's count of submissions and collective joins so far.
    pub seq: u64,
    pub work: u64,
    pub programs: Vec<(PeIdx, Launch)>,
    pub scope: Scope,
    /// The neighbour tables of `scope` to land first: a communicator the
    /// autotuner picked for this collective, used here for the first time.
    pub install: Option<kernbench_runtime::machine::Tables>,
    /// The ranks whose order it keeps: the launching rank, or a
    /// collective's members.
    pub members: Vec<u32>,
    /// (work, rank): the work each member ran last on the stream this goes
    /// on; it leaves the host once they have all ended.
    pub after: Vec<(u64, u32)>,
}

/// One entry of a rank's submission order not yet handed to the engine:
/// a work and the PEs it runs on (a collective's: its group's participants).
pub(super) struct Queued {
    pub work: u64,
    /// Sorted.
    pub pes: Vec<PeIdx>,
    pub what: String,
}

/// A collective some members have joined: what its submission will carry.
pub(super) struct Gather {
    /// The latest host clock of the members at their joins.
    pub at: Tick,
    /// (rank, seq) of the lowest member rank that joined, for the order.
    pub key: (u32, u64),
    pub after: Vec<(u64, u32)>,
}

/// Where a piece of work is.
pub(super) enum WorkState {
    /// A collective some members have not joined yet.
    Gathering,
    /// Submitted by a worker, not yet handed to the engine.
    Pending,
    /// Handed to the engine, on the queues of its scope.
    Running(LaunchHandle, Scope),
}

#[derive(Debug)]
pub(super) enum Status {
    Runnable,
    /// Waiting for work `0`.
    Waiting(u64),
    Finished(Result<(), DistError>),
}

/// Everything the workers and the scheduler share, behind one lock.
pub(super) struct Sched<'p> {
    pub pg: &'p mut ProcessGroup,
    /// The worker allowed to run; None: the scheduler's turn.
    pub turn: Option<u32>,
    pub status: Vec<Status>,
    /// What a waiting worker resumes with.
    pub resume: Vec<Option<Result<LaunchReport, DistError>>>,
    /// Each rank's host clock: when its next submission leaves the host.
    pub host: Vec<Tick>,
    /// Each rank's device (SIP), `set_device`.
    pub device: Vec<u32>,
    /// Each rank's submissions and collective joins so far.
    pub seq: Vec<u64>,
    pub works: BTreeMap<u64, WorkState>,
    /// The communicator each submitted collective runs on, until its first
    /// member to resume computes the measures.
    pub comms: BTreeMap<u64, (kernbench_ccl::Communicator, kernbench_ccl::Operand)>,
    /// A finished collective's measures, computed by its first member to
    /// resume, with the members yet to read them.
    pub results: BTreeMap<u64, (kernbench_ccl::CollResult, usize)>,
    pub next_work: u64,
    pub pending: Vec<Submission>,
    /// Each rank's submissions not yet handed to the engine, in its order.
    pub queued: Vec<Vec<Queued>>,
    /// Collectives being joined, by work.
    pub gathers: BTreeMap<u64, Gather>,
    /// Each rank's streams: the work submitted last on each (by stream id).
    pub tails: Vec<BTreeMap<u32, u64>>,
    /// Each rank's current compute and communication streams.
    pub current: Vec<[Stream; 2]>,
    /// Each rank's streams made so far (2: the two defaults).
    pub streams: Vec<u32>,
    /// When each finished work ran, while a member has yet to wait for it
    /// or a stream's next work may follow it (`Sched::prune`).
    pub ended: BTreeMap<u64, LaunchReport>,
    /// The members yet to wait for each work.
    pub unwaited: BTreeMap<u64, Vec<u32>>,
    /// Each rank's works submitted while it keeps a record
    /// (`Rank::record_works`), in submission order; None: not recording.
    pub record: Vec<Option<Vec<super::work::Work>>>,
    /// Works in some rank's record, by how many records hold them, and
    /// when those that ended ran (kept past `Sched::prune` until taken).
    pub recorded: BTreeMap<u64, (u32, Option<LaunchReport>)>,
    /// The tick the last launch message to each PE left the host: later
    /// ones leave no earlier, so each PE receives them in hand-over order.
    pub pe_sent: BTreeMap<PeIdx, Tick>,
    /// Set when a worker failed: every later call of every worker fails.
    pub abort: Option<String>,
    /// The rank that ran last, and the order ranks take turns in.
    pub last: Option<u32>,
    pub order: TurnOrder,
}

pub(super) struct Shared<'p> {
    pub state: Mutex<Sched<'p>>,
    /// The scheduler waits on `sched`, worker r on `ranks[r]`: a turn wakes
    /// one thread, not all of them.
    pub sched: Condvar,
    pub ranks: Vec<Condvar>,
}

impl<'p> Shared<'p> {
    pub fn lock(&self) -> MutexGuard<'_, Sched<'p>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the turn back to the scheduler and waits for this worker's next turn.
    pub fn yield_turn<'g>(
        &self,
        mut g: MutexGuard<'g, Sched<'p>>,
        rank: u32,
    ) -> MutexGuard<'g, Sched<'p>> {
        self.pass_turn(&mut g);
        self.ranks[rank as usize]
            .wait_while(g, |s| s.turn != Some(rank))
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Hands the turn straight to the next runnable worker, or to the
    /// scheduler when none is (one thread woken per turn).
    pub fn pass_turn(&self, g: &mut Sched<'p>) {
        if let Some(why) = g.abort.clone() {
            g.fail_waiters(&why);
        }
        match g.next_runnable(g.last, g.order) {
            Some(r) => {
                g.last = Some(r);
                g.turn = Some(r);
                self.ranks[r as usize].notify_one();
            }
            None => {
                g.turn = None;
                self.sched.notify_one();
            }
        }
    }
}

impl Sched<'_> {
    /// Notes `w` in its rank's record, if the rank keeps one.
    pub fn note(&mut self, w: super::work::Work) {
        if let Some(r) = &mut self.record[w.rank as usize] {
            r.push(w);
            self.recorded.entry(w.id).or_insert((0, None)).0 += 1;
        }
    }

    /// Ends work `id` if it runs and the engine has finished it: its
    /// report goes to `ended` (and to the records that hold it). Whether
    /// it ended now.
    fn end_if_finished(&mut self, id: u64) -> Result<bool, String> {
        let done = matches!(self.works.get(&id), Some(WorkState::Running(h, _)) if self.pg.machine.finished(h));
        if !done {
            return Ok(false);
        }
        let Some(WorkState::Running(h, _)) = self.works.remove(&id) else {
            return Ok(false);
        };
        let report = self.pg.machine.wait(h).map_err(|e| e.to_string())?;
        self.ended.insert(id, report);
        if let Some(r) = self.recorded.get_mut(&id) {
            r.1 = Some(report);
        }
        Ok(true)
    }

    /// When recorded work `id` ran, if it has ended (a running work the
    /// engine has finished ends here); forgets it once every record that
    /// holds it has asked.
    pub fn take_recorded(&mut self, id: u64) -> Result<Option<LaunchReport>, String> {
        self.end_if_finished(id)?;
        let Some((count, ran)) = self.recorded.get_mut(&id) else {
            return Ok(None);
        };
        let ran = *ran;
        *count -= 1;
        if *count == 0 {
            self.recorded.remove(&id);
        }
        Ok(ran)
    }

    pub fn new_work(&mut self, state: WorkState) -> u64 {
        let id = self.next_work;
        self.next_work += 1;
        self.works.insert(id, state);
        id
    }

    /// Joins the next collective epoch of group `group`; the join that opens
    /// an epoch creates the work every member will wait on.
    pub fn join_epoch(
        &mut self,
        group: usize,
        rank: u32,
        call: super::barrier::Call,
    ) -> Result<super::barrier::Joined, DistError> {
        self.seq[rank as usize] += 1;
        let rg = &mut self.pg.groups[group];
        let joined = rg
            .barrier
            .join(rank, call, &rg.name, self.next_work)
            .map_err(DistError::Collective)?;
        if joined.opened {
            self.new_work(WorkState::Gathering);
        }
        Ok(joined)
    }

    /// The queue scopes of work submitted and not yet ended: their
    /// communicators must stay installed.
    pub fn busy_scopes(&self) -> BTreeSet<Scope> {
        let running = self.works.values().filter_map(|w| match w {
            WorkState::Running(_, scope) => Some(*scope),
            _ => None,
        });
        self.pending
            .iter()
            .map(|s| s.scope)
            .chain(running)
            .collect()
    }

    /// Blocks `rank` until work `work` is done.
    pub fn wait_for<'g, 'p>(
        shared: &Shared<'p>,
        mut g: MutexGuard<'g, Sched<'p>>,
        rank: u32,
        work: u64,
    ) -> (MutexGuard<'g, Sched<'p>>, Result<LaunchReport, DistError>) {
        g.status[rank as usize] = Status::Waiting(work);
        let mut g = shared.yield_turn(g, rank);
        let r = g.resume[rank as usize]
            .take()
            .unwrap_or_else(|| Err(DistError::Aborted("resumed without a result".into())));
        (g, r)
    }

    /// The latest host clock of a group's members: when its collective leaves.
    pub fn latest_clock(&self, group: usize) -> Tick {
        let ranks = &self.pg.groups[group].ranks;
        ranks
            .iter()
            .map(|&r| self.host[r as usize])
            .max()
            .unwrap_or(0)
    }

    /// Work `w` is done: every rank waiting on it resumes with `report`, its
    /// host clock at the work's end.
    pub fn complete(&mut self, w: u64, report: LaunchReport) {
        for r in 0..self.status.len() {
            if matches!(self.status[r], Status::Waiting(x) if x == w) {
                self.status[r] = Status::Runnable;
                self.resume[r] = Some(Ok(report));
                self.host[r] = self.host[r].max(report.end);
            }
        }
    }

    /// The next runnable rank after `last` in the turn order (the first
    /// in that order when none ran yet).
    fn next_runnable(&self, last: Option<u32>, order: TurnOrder) -> Option<u32> {
        let n = self.status.len() as u32;
        (1..=n)
            .map(|k| match order {
                TurnOrder::Ascending => (last.unwrap_or(n - 1) + k) % n,
                TurnOrder::Descending => (last.unwrap_or(0) + n - k) % n,
            })
            .find(|&r| matches!(self.status[r as usize], Status::Runnable))
    }

    /// Wakes every waiting worker with `e` (the run is failing).
    fn fail_waiters(&mut self, e: &str) {
        for r in 0..self.status.len() {
            if matches!(self.status[r], Status::Waiting(_)) {
                self.status[r] = Status::Runnable;
                self.resume[r] = Some(Err(DistError::Aborted(e.into())));
            }
        }
    }

    /// Why the waiting workers can never go on: who waits in which
    /// collective, and where the members it lacks are.
    fn stuck(&self) -> String {
        if let Some(why) = self.conflict() {
            return why;
        }
        let mut out = Vec::new();
        for g in &self.pg.groups {
            if let Some((epoch, e)) = g.barrier.waiting() {
                let call = e
                    .joined
                    .values()
                    .next()
                    .map(|c| c.to_string())
                    .unwrap_or_default();
                let joined: Vec<String> = e.joined.keys().map(|r| r.to_string()).collect();
                let missing: Vec<String> = g
                    .ranks
                    .iter()
                    .filter(|r| !e.joined.contains_key(r))
                    .map(|&r| match &self.status[r as usize] {
                        Status::Finished(_) => format!("rank {r} has finished"),
                        _ => format!("rank {r} waits elsewhere"),
                    })
                    .collect();
                out.push(format!(
                    "rank(s) {} joined {call} (collective #{epoch} of group '{}'), but {}",
                    joined.join(", "),
                    g.name,
                    missing.join(", ")
                ));
            }
        }
        out.extend(self.p2p_waits());
        if out.is_empty() {
            let state = |w: &u64| match self.works.get(w) {
                Some(WorkState::Gathering) => "being joined",
                Some(WorkState::Pending) => "held back",
                Some(WorkState::Running(..)) => "running",
                None => "unknown",
            };
            for (r, st) in self.status.iter().enumerate() {
                if let Status::Waiting(w) = st {
                    out.push(format!("rank {r} waits for work #{w} ({})", state(w)));
                }
            }
            return format!("nothing can run: {}", out.join("; "));
        }
        format!(
            "the ranks can never go on: {}; every member must make the same collective calls, and every recv needs its matching send",
            out.join("; ")
        )
    }

    /// Runs the engine until some awaited work finishes, then resumes its
    /// waiters; meanwhile hands the engine each submission as soon as
    /// nothing before it (on its stream, or on its PEs in a member's
    /// order) holds it back. Err: the run failed or nothing can finish.
    fn progress(&mut self) -> Result<(), String> {
        self.prune();
        let awaited: BTreeSet<u64> = self
            .status
            .iter()
            .filter_map(|s| match s {
                Status::Waiting(w) => Some(*w),
                _ => None,
            })
            .collect();
        loop {
            let finished = self.advance(&awaited)?;
            let mut resumed = false;
            for w in finished.into_iter().filter(|w| awaited.contains(w)) {
                self.complete(w, self.ended[&w]);
                resumed = true;
            }
            if resumed {
                return Ok(());
            }
        }
    }

    /// Hands over what can go, then runs the engine until one of the
    /// works in `awaited`, or one a held-back submission follows on its
    /// stream, finishes; returns those that did. Err: none is running.
    fn advance(&mut self, awaited: &BTreeSet<u64>) -> Result<Vec<u64>, String> {
        self.flush()?;
        let held: BTreeSet<u64> = self
            .pending
            .iter()
            .flat_map(|s| s.after.iter().map(|a| a.0))
            .collect();
        let running: Vec<(u64, &LaunchHandle)> = awaited
            .union(&held)
            .filter_map(|w| match self.works.get(w) {
                Some(WorkState::Running(h, _)) => Some((*w, h)),
                _ => None,
            })
            .collect();
        if running.is_empty() {
            return Err(self.stuck());
        }
        let handles: Vec<&LaunchHandle> = running.iter().map(|r| r.1).collect();
        let ids: Vec<u64> = running.iter().map(|r| r.0).collect();
        self.pg
            .machine
            .run_until_any(&handles)
            .map_err(|e| e.to_string())?;
        let mut finished = Vec::new();
        for w in ids {
            if self.end_if_finished(w)? {
                finished.push(w);
            }
        }
        Ok(finished)
    }

    /// After every worker returned: hands the engine every submission
    /// (running it while some wait for their stream), and fails when a
    /// collective was joined by some members only.
    fn drain(&mut self) -> Result<(), String> {
        while !self.pending.is_empty() {
            self.advance(&BTreeSet::new())?;
        }
        if self.pg.groups.iter().any(|g| g.barrier.waiting().is_some()) {
            return Err(self.stuck());
        }
        Ok(())
    }
}

impl ProcessGroup {
    /// Runs `worker` once per rank (`nprocs` must be the world size), like
    /// `torch.multiprocessing.spawn`, and returns when every worker has
    /// returned. A worker's error (or panic) ends the others' calls with
    /// [`DistError::Aborted`] and comes back naming its rank; the group's
    /// half-joined collectives are forgotten, so the group stays usable.
    pub fn spawn<F>(&mut self, nprocs: u32, worker: F) -> Result<(), DistError>
    where
        F: Fn(&mut super::Rank) -> Result<(), DistError> + Sync,
    {
        if nprocs != self.world_size {
            return Err(DistError::Config(format!(
                "spawn of {nprocs} workers on a world of {} ranks; allowed: nprocs = world size {} (one worker per rank)",
                self.world_size, self.world_size
            )));
        }
        let n = nprocs as usize;
        let now = self.machine.engine.now();
        let order = self.turn_order;
        let shared = Shared {
            state: Mutex::new(Sched {
                pg: self,
                turn: None,
                status: (0..n).map(|_| Status::Runnable).collect(),
                resume: (0..n).map(|_| None).collect(),
                host: vec![now; n],
                device: (0..nprocs).collect(),
                seq: vec![0; n],
                works: BTreeMap::new(),
                comms: BTreeMap::new(),
                results: BTreeMap::new(),
                next_work: 0,
                pending: Vec::new(),
                queued: (0..n).map(|_| Vec::new()).collect(),
                gathers: BTreeMap::new(),
                tails: vec![BTreeMap::new(); n],
                current: (0..nprocs)
                    .map(|r| {
                        [StreamKind::Compute, StreamKind::Communication]
                            .map(|k| Stream::default_of(r, k))
                    })
                    .collect(),
                streams: vec![2; n],
                ended: BTreeMap::new(),
                recorded: BTreeMap::new(),
                unwaited: BTreeMap::new(),
                record: vec![None; n],
                pe_sent: BTreeMap::new(),
                abort: None,
                last: None,
                order,
            }),
            sched: Condvar::new(),
            ranks: (0..n).map(|_| Condvar::new()).collect(),
        };
        std::thread::scope(|scope| {
            for rank in 0..nprocs {
                let (shared, worker) = (&shared, &worker);
                let started = std::thread::Builder::new()
                    .name(format!("rank {rank}"))
                    .stack_size(WORKER_STACK)
                    .spawn_scoped(scope, move || run_worker(shared, rank, worker));
                if let Err(e) = started {
                    let mut g = shared.lock();
                    let why = format!(
                        "the OS would not start the worker thread of rank {rank} ({e}); allowed: fewer ranks, or a higher thread limit (ulimit -u)"
                    );
                    g.abort.get_or_insert(why.clone());
                    g.status[rank as usize] = Status::Finished(Err(DistError::Config(why)));
                }
            }
            schedule(&shared);
        });
        let mut s = shared.state.into_inner().unwrap_or_else(|e| e.into_inner());
        // Work never waited for still runs; hand it all to the engine.
        if s.abort.is_none()
            && let Err(e) = s.drain()
        {
            s.abort.get_or_insert(e);
        }
        let failed = s.abort.is_some();
        let status = std::mem::take(&mut s.status);
        if failed {
            s.pg.reset_barriers();
        }
        for (rank, st) in status.into_iter().enumerate() {
            if let Status::Finished(Err(e)) = st
                && !matches!(e, DistError::Aborted(_))
            {
                return Err(DistError::Worker {
                    rank: rank as u32,
                    error: Box::new(e),
                });
            }
        }
        if let Some(why) = s.abort {
            return Err(DistError::Aborted(why));
        }
        Ok(())
    }
}

/// One worker's thread: waits for its first turn, runs, reports.
fn run_worker<F>(shared: &Shared, rank: u32, worker: &F)
where
    F: Fn(&mut super::Rank) -> Result<(), DistError> + Sync,
{
    drop(
        shared.ranks[rank as usize]
            .wait_while(shared.lock(), |s| s.turn != Some(rank))
            .unwrap_or_else(|e| e.into_inner()),
    );
    let mut ctx = super::Rank { rank, shared };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker(&mut ctx)))
        .unwrap_or_else(|p| Err(DistError::Panic(panic_message(p.as_ref()))));
    let mut g = shared.lock();
    if let Err(e) = &result
        && g.abort.is_none()
        && !matches!(e, DistError::Aborted(_))
    {
        g.abort = Some(format!("rank {rank} failed: {e}"));
    }
    g.status[rank as usize] = Status::Finished(result);
    shared.pass_turn(&mut g);
}

/// The scheduler: starts the turns, and moves the simulation whenever no
/// worker can run.
fn schedule(shared: &Shared) {
    let mut g = shared.lock();
    shared.pass_turn(&mut g);
    loop {
        g = shared
            .sched
            .wait_while(g, |s| s.turn.is_some())
            .unwrap_or_else(|e| e.into_inner());
        if g.status.iter().all(|s| matches!(s, Status::Finished(_))) {
            return;
        }
        if g.next_runnable(None, g.order).is_none()
            && let Err(e) = progress_or_panic(&mut g)
        {
            g.abort.get_or_insert(e.clone());
            g.fail_waiters(&e);
        }
        shared.pass_turn(&mut g);
    }
}

/// Runs the simulation on, turning a panic inside it into an error: the
/// workers waiting on it are then failed instead of waiting for ever on a
/// scheduler that unwound.
fn progress_or_panic(g: &mut Sched<'_>) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.progress())).unwrap_or_else(|p| {
        Err(format!(
            "the simulation panicked: {} (a kernbench bug: please report it; this process group's machine is left in an unknown state, build a new one)",
            panic_message(p.as_ref())
        ))
    })
}

/// The text a panic carried.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}
