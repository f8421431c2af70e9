//! What a worker sees: its rank, its device, tensors on it, kernel launches
//! and collectives — torch.distributed's surface with rank = SIP.

use super::DistError;
use super::barrier::Call;
use super::group::{GroupId, RankUnit, WORLD};
use super::layout;
use super::spawn::{Gather, Sched, Shared, Submission, WorkState};
use super::tensor::{DPPolicy, Tensor, gather, place, scatter};
use super::work::{Stream, StreamKind, Work, WorkKind, WorkRecord, WorkReport};
use kernbench_ccl::{Buffers, CollResult, Collective, Job, LaneBuffer, Operand, ReduceOp};
use kernbench_runtime::kernel::Kernel;
use kernbench_runtime::machine::LaunchReport;
use kernbench_runtime::measured::shape_key;
use kernbench_runtime::memory_map::{BUFFER_ALIGN, End};
use kernbench_spec::topology::address::{Location, Space};
use kernbench_systems::DType;
use kernbench_systems::PeIdx;
use kernbench_systems::Tick;
use kernbench_systems::ipcq::Scope;
use std::sync::MutexGuard;

/// One worker's view of the process group.
pub struct Rank<'s, 'p> {
    pub(super) rank: u32,
    pub(super) shared: &'s Shared<'p>,
}

impl<'p> Rank<'_, 'p> {
    /// The SIP of this rank's current device (in the rank = flat PE mode,
    /// the SIP of its PE), with the machine's cubes per SIP and PEs per cube.
    fn device_sip(&self, g: &Sched) -> (u32, u32, u32) {
        let t = &g.pg.machine.topology;
        let (cps, ppc) = (t.cubes_per_sip(), t.pes_per_cube);
        let device = g.device[self.rank as usize];
        let sip = match g.pg.unit {
            RankUnit::Sip => device,
            RankUnit::Pe => device / ppc / cps,
        };
        (sip, cps, ppc)
    }

    /// Takes the lock; fails if the spawn is being aborted.
    pub(super) fn enter(&self) -> Result<MutexGuard<'_, Sched<'p>>, DistError> {
        let g = self.shared.lock();
        match &g.abort {
            Some(why) => Err(DistError::Aborted(why.clone())),
            None => Ok(g),
        }
    }

    /// This worker's rank (`torch.distributed.get_rank`).
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the world (`get_world_size`).
    pub fn world_size(&self) -> u32 {
        self.shared.lock().pg.world_size
    }

    /// Binds this worker to SIP `sip` (`torch.ahbm.set_device`): tensors and
    /// kernels go there. A worker starts on SIP = its rank.
    /// In the rank = flat PE mode a device is a PE (global index).
    pub fn set_device(&mut self, device: u32) -> Result<(), DistError> {
        let mut g = self.enter()?;
        let (n, what) = match g.pg.unit {
            RankUnit::Sip => (g.pg.machine.system.spec.system.sips.count, "SIPs"),
            RankUnit::Pe => (g.pg.machine.topology.n_pes() as u32, "PEs"),
        };
        if device >= n {
            return Err(DistError::Config(format!(
                "set_device({device}): the machine has {what} 0..{n}"
            )));
        }
        g.device[self.rank as usize] = device;
        Ok(())
    }

    /// The SIP (in the rank = flat PE mode: the PE) this worker's tensors and kernels go to.
    pub fn current_device(&self) -> u32 {
        self.shared.lock().device[self.rank as usize]
    }

    /// Cubes per SIP and PEs per cube of the machine.
    pub fn sip_shape(&self) -> (u32, u32) {
        let g = self.shared.lock();
        let t = &g.pg.machine.topology;
        (t.cubes_per_sip(), t.pes_per_cube)
    }

    /// The spec of the machine the ranks share (a copy).
    pub fn system_spec(&self) -> kernbench_spec::spec::SystemSpec {
        self.shared.lock().pg.machine.system.spec.clone()
    }

    /// Whether values travel with the timing (functional) or only sizes.
    pub fn data_mode(&self) -> kernbench_systems::memory::DataMode {
        *self
            .shared
            .lock()
            .pg
            .machine
            .engine
            .world
            .resource::<kernbench_systems::memory::DataMode>()
    }

    /// The largest free TCM range, in bytes, on the least free of PEs
    /// `(cube, pe)` of the current device (what a kernel may use as scratch).
    pub fn largest_free_tcm(&self, pes: &[(u32, u32)]) -> Result<u64, DistError> {
        let g = self.enter()?;
        let m = &g.pg.machine;
        let (sip, _, _) = self.device_sip(&g);
        Ok(pes
            .iter()
            .map(|&(c, p)| {
                let inst = m.memory.instance_of(Space::Tcm, m.pe_index(sip, c, p));
                m.memory
                    .free_ranges(Space::Tcm, inst)
                    .iter()
                    .map(|r| r.1)
                    .max()
                    .unwrap_or(0)
            })
            .min()
            .unwrap_or(0))
    }

    /// Starts a record of every work this rank submits from now on (what
    /// it was, its stream, when it ran): a study's breakdown reads it with
    /// [`Rank::take_work_record`], so the program that submits the work
    /// keeps no books. A record already started starts again empty.
    pub fn record_works(&mut self) -> Result<(), DistError> {
        let mut g = self.enter()?;
        g.record[self.rank as usize] = Some(Vec::new());
        Ok(())
    }

    /// The works submitted since [`Rank::record_works`] that have ended
    /// (waited for or not), in submission order; stops recording (empty
    /// when none was started). Wait for the last work of each stream
    /// first to have them all.
    pub fn take_work_record(&mut self) -> Result<Vec<WorkRecord>, DistError> {
        let mut g = self.enter()?;
        let works = g.record[self.rank as usize].take().unwrap_or_default();
        let mut out = Vec::with_capacity(works.len());
        for w in works {
            if let Some(ran) = g.take_recorded(w.id).map_err(DistError::Run)? {
                out.push(WorkRecord {
                    class: w.class(),
                    stream: w.stream,
                    start: ran.start,
                    end: ran.end,
                });
            }
        }
        Ok(out)
    }

    /// This worker's host clock: when its next submission leaves the host.
    pub fn now(&self) -> Tick {
        self.shared.lock().host[self.rank as usize]
    }

    /// A `shape` f16 tensor on the current device under `policy`, in HBM;
    /// every shard is allocated from its cube's HBM (bottom up, 64-byte
    /// aligned). In the rank = flat PE mode: one shard in the PE's own TCM.
    pub fn empty(&mut self, shape: (usize, usize), policy: DPPolicy) -> Result<Tensor, DistError> {
        self.empty_typed(shape, policy, DType::F16)
    }

    /// As [`Rank::empty`], a tensor of `dtype` (its shards take
    /// elements × `dtype.bytes()`).
    pub fn empty_typed(
        &mut self,
        shape: (usize, usize),
        policy: DPPolicy,
        dtype: DType,
    ) -> Result<Tensor, DistError> {
        let space = match self.shared.lock().pg.unit {
            RankUnit::Sip => Space::Hbm,
            RankUnit::Pe => Space::Tcm,
        };
        self.allocate(space, (shape, dtype), policy, End::Bottom)
    }

    /// As [`Rank::empty`], in another memory (`Space::Sram`, or `Space::Tcm`
    /// of each shard's PE).
    pub fn empty_in(
        &mut self,
        space: Space,
        shape: (usize, usize),
        policy: DPPolicy,
    ) -> Result<Tensor, DistError> {
        self.allocate(space, (shape, DType::F16), policy, End::Bottom)
    }

    /// A tensor for a model's parameters, in HBM, allocated from the top
    /// of each cube's memory (where IPCQ slot areas also live): parameters
    /// of any shape — uneven splits, a bias on one rank only — then never
    /// move the offsets of the tensors [`Rank::empty`] allocates bottom up,
    /// which a collective needs equal on every cube and rank.
    pub fn parameter(
        &mut self,
        shape: (usize, usize),
        policy: DPPolicy,
    ) -> Result<Tensor, DistError> {
        self.parameter_typed(shape, policy, DType::F16)
    }

    /// As [`Rank::parameter`], a tensor of `dtype` (f32 master weights).
    pub fn parameter_typed(
        &mut self,
        shape: (usize, usize),
        policy: DPPolicy,
        dtype: DType,
    ) -> Result<Tensor, DistError> {
        self.allocate(Space::Hbm, (shape, dtype), policy, End::Top)
    }

    fn allocate(
        &mut self,
        space: Space,
        (shape, dtype): ((usize, usize), DType),
        policy: DPPolicy,
        end: End,
    ) -> Result<Tensor, DistError> {
        let mut g = self.enter()?;
        let (device, unit) = (g.device[self.rank as usize], g.pg.unit);
        let (sip, cps, ppc) = self.device_sip(&g);
        let m = &mut g.pg.machine;
        let mut shards =
            place((shape, dtype), &policy, sip, cps, ppc).map_err(DistError::Config)?;
        if unit == RankUnit::Pe {
            if shards.len() != 1 {
                return Err(DistError::Config(format!(
                    "in the rank = flat PE mode a tensor is one shard on its rank's PE, but this DPPolicy makes {}; allowed: DPPolicy::cube_rows(1)",
                    shards.len()
                )));
            }
            (shards[0].cube, shards[0].pe) = ((device / ppc) % cps, device % ppc);
        }
        for k in 0..shards.len() {
            let s = &shards[k];
            let instance = m.memory.instance_of(space, m.pe_index(sip, s.cube, s.pe));
            let what = || {
                format!(
                    "a shard of {} B of a {}x{} tensor of rank {}",
                    s.nbytes, shape.0, shape.1, self.rank
                )
            };
            match m
                .memory
                .alloc(space, instance, s.nbytes, BUFFER_ALIGN, end, &what)
            {
                Ok(addr) => shards[k].addr = addr,
                Err(e) => {
                    // Give back the shards placed so far: all or nothing.
                    for s in &shards[..k] {
                        let instance = m.memory.instance_of(space, m.pe_index(sip, s.cube, s.pe));
                        m.memory
                            .free(space, instance, s.addr)
                            .map_err(DistError::Memory)?;
                    }
                    return Err(DistError::Memory(e));
                }
            }
        }
        Ok(Tensor {
            rank: self.rank,
            shape,
            dtype,
            policy,
            space,
            shards,
        })
    }

    /// Gives a tensor's memory back.
    pub fn free(&mut self, t: Tensor) -> Result<(), DistError> {
        let mut g = self.enter()?;
        let m = &mut g.pg.machine;
        for s in &t.shards {
            let instance = m
                .memory
                .instance_of(t.space, m.pe_index(s.sip, s.cube, s.pe));
            m.memory
                .free(t.space, instance, s.addr)
                .map_err(DistError::Memory)?;
        }
        Ok(())
    }

    fn location(t: &Tensor, s: &super::tensor::Shard) -> Location {
        Location {
            space: t.space,
            sip: s.sip,
            cube: s.cube,
            // SRAM and HBM belong to the cube: only a TCM address names its PE.
            pe: if t.space == Space::Tcm { s.pe } else { 0 },
            offset: s.addr,
        }
    }

    /// Fills a tensor from row-major host data, each value rounded to the
    /// tensor's dtype (functional mode; each shard gets its part,
    /// replicated parts every copy).
    pub fn write(&mut self, t: &Tensor, data: &[f32]) -> Result<(), DistError> {
        if data.len() != t.elems() {
            return Err(DistError::Config(format!(
                "write of {} values into a {}x{} tensor; allowed: exactly {} values, row-major",
                data.len(),
                t.shape.0,
                t.shape.1,
                t.elems()
            )));
        }
        let mut g = self.enter()?;
        for s in &t.shards {
            let part = gather(data, t.shape.1, &s.block);
            g.pg.machine
                .write_as(Self::location(t, s), t.dtype, &part)
                .map_err(DistError::Memory)?;
        }
        Ok(())
    }

    /// Reads a tensor back to the host, row-major, values of its dtype (a
    /// replicated part comes from its first shard in (cube, pe) order).
    pub fn read(&self, t: &Tensor) -> Result<Vec<f32>, DistError> {
        let g = self.enter()?;
        let mut out = vec![0.0; t.elems()];
        for s in t.shards.iter().rev() {
            let part =
                g.pg.machine
                    .read_as(Self::location(t, s), s.block.elems(), t.dtype)
                    .map_err(DistError::Memory)?;
            scatter(&mut out, t.shape.1, &s.block, &part);
        }
        Ok(out)
    }

    /// Launches `kernel` on PEs `(cube, pe)` of the current device, from
    /// this rank's host clock; returns at once. The launch runs when the
    /// simulation moves (every worker waiting), alongside other ranks' work.
    pub fn launch<A>(
        &mut self,
        kernel: Kernel<A>,
        args: &A,
        pes: &[(u32, u32)],
    ) -> Result<Work, DistError> {
        self.launch_maybe_shaped(kernel, args, pes, None)
    }

    /// [`Rank::launch`] of a kernel whose programs' timing depends on
    /// nothing but `shape` (its arguments without ranks, SIPs and
    /// addresses), the kernel and the PEs: under measured compute
    /// (`simulation.compute: measured`) a launch of a shape already
    /// measured on this SIP kind is not traced at all.
    pub fn launch_shaped<A>(
        &mut self,
        kernel: Kernel<A>,
        args: &A,
        pes: &[(u32, u32)],
        shape: &str,
    ) -> Result<Work, DistError> {
        self.launch_maybe_shaped(kernel, args, pes, Some(shape))
    }

    fn launch_maybe_shaped<A>(
        &mut self,
        kernel: Kernel<A>,
        args: &A,
        pes: &[(u32, u32)],
        shape: Option<&str>,
    ) -> Result<Work, DistError> {
        let mut g = self.enter()?;
        let (sip, cps, ppc) = self.device_sip(&g);
        if let Some(&(c, p)) = pes.iter().find(|&&(c, p)| c >= cps || p >= ppc) {
            return Err(DistError::Config(format!(
                "launch on (cube {c}, pe {p}): a SIP has cubes 0..{cps} of PEs 0..{ppc}"
            )));
        }
        let m = &mut g.pg.machine;
        let global: Vec<PeIdx> = pes.iter().map(|&(c, p)| m.pe_index(sip, c, p)).collect();
        let kind = m.system.kinds.index_of(sip);
        let named = shape.map(|s| shape_key((kernel as usize, kind, pes, s)));
        let recalled = match (&mut m.costs, &named) {
            (Some(costs), Some(key)) => costs.recall(key, &global),
            _ => None,
        };
        let programs = match recalled {
            Some(busy) => busy,
            None => {
                let traced = m.trace(kernel, args, &global)?;
                match (&mut m.costs, named) {
                    (Some(costs), named) => costs.replace(traced, named)?,
                    (None, _) => traced,
                }
            }
        };
        let work = g.new_work(WorkState::Pending);
        let r = self.rank as usize;
        let stream = g.current[r][0];
        let after = g.follow(stream, work).into_iter().collect();
        g.seq[r] += 1;
        let seq = g.seq[r];
        let what = format!("launch (submission {seq} of rank {r})");
        g.enqueue(self.rank, work, global, what);
        g.unwaited.insert(work, vec![self.rank]);
        let at = g.host[r];
        g.pending.push(Submission {
            at,
            rank: self.rank,
            seq,
            work,
            programs,
            scope: Scope::DEFAULT,
            install: None,
            members: vec![self.rank],
            after,
        });
        let handle = Work {
            id: work,
            rank: self.rank,
            kind: WorkKind::Launch,
            stream,
            seq,
        };
        g.note(handle);
        Ok(handle)
    }

    /// A new stream of `kind` on this rank (`torch.cuda.Stream()`): make it
    /// current with [`Rank::set_stream`].
    pub fn new_stream(&mut self, kind: StreamKind) -> Result<Stream, DistError> {
        let mut g = self.enter()?;
        let r = self.rank as usize;
        let id = g.streams[r];
        g.streams[r] += 1;
        Ok(Stream {
            rank: self.rank,
            id,
            kind,
        })
    }

    /// The stream this rank's launches (`Compute`) or collectives
    /// (`Communication`) go on now.
    pub fn current_stream(&self, kind: StreamKind) -> Stream {
        self.shared.lock().current[self.rank as usize][kind as usize]
    }

    /// Makes `stream` current for its kind (`torch.cuda.set_stream`): later
    /// launches (a compute stream) or collectives (a communication stream)
    /// of this rank go on it.
    pub fn set_stream(&mut self, stream: Stream) -> Result<(), DistError> {
        let mut g = self.enter()?;
        if stream.rank != self.rank {
            return Err(DistError::Config(format!(
                "rank {} set_stream({stream}): a stream belongs to the rank that made it; allowed: a stream of rank {} (Rank::new_stream)",
                self.rank, self.rank
            )));
        }
        g.current[self.rank as usize][stream.kind as usize] = stream;
        Ok(())
    }

    /// A work this rank may wait for or ask about: its own.
    fn own(&self, w: &Work) -> Result<(), DistError> {
        if w.rank != self.rank {
            return Err(DistError::Config(format!(
                "rank {} asked about {w}: a Work belongs to the rank that submitted it; allowed: wait for it on rank {}",
                self.rank, w.rank
            )));
        }
        Ok(())
    }

    /// Whether `w` has finished, without moving the simulation
    /// (`Work.is_completed`): true once the engine has run past its end.
    /// Never true before some worker waits (only then does the simulation
    /// move), so poll it between waits, never in a loop by itself.
    pub fn is_completed(&self, w: &Work) -> Result<bool, DistError> {
        self.own(w)?;
        let g = self.enter()?;
        Ok(match g.works.get(&w.id) {
            None => true,
            Some(WorkState::Running(h, _)) => g.pg.machine.finished(h),
            Some(_) => false,
        })
    }

    /// Waits until `w` of this rank has finished (`Work.wait`): when it ran
    /// and, for a collective, its measures. This rank's clock moves to its
    /// end if later. A work is waited for once.
    pub fn wait(&mut self, w: &Work) -> Result<WorkReport, DistError> {
        self.own(w)?;
        let mut g = self.enter()?;
        let members = g.unwaited.get_mut(&w.id);
        let Some(i) = members
            .as_ref()
            .and_then(|m| m.iter().position(|&r| r == self.rank))
        else {
            return Err(DistError::Config(format!(
                "rank {} waits a second time for {w}; a Work is waited for once: keep the WorkReport its first wait returned",
                self.rank
            )));
        };
        if let Some(m) = members {
            m.swap_remove(i);
            if m.is_empty() {
                g.unwaited.remove(&w.id);
            }
        }
        let r = self.rank as usize;
        let ran = match g.ended.get(&w.id).copied() {
            Some(ran) => {
                g.host[r] = g.host[r].max(ran.end);
                ran
            }
            None => {
                let (g2, ran) = Sched::wait_for(self.shared, g, self.rank, w.id);
                g = g2;
                ran?
            }
        };
        let collective = match w.kind {
            WorkKind::Launch | WorkKind::Transfer { .. } => None,
            WorkKind::Collective { group, job } => Self::measures(&mut g, w.id, group, job, ran),
        };
        Ok(WorkReport {
            start: ran.start,
            end: ran.end,
            collective,
        })
    }

    /// A finished collective's measures: its first member to ask computes
    /// them (the bound is not free), every member reads them.
    fn measures(
        g: &mut Sched,
        work: u64,
        group: usize,
        job: Job,
        ran: LaunchReport,
    ) -> Option<CollResult> {
        let members = g.pg.groups[group].ranks.len();
        if let Some((comm, operand)) = g.comms.remove(&work) {
            let res = comm.operand_result(&g.pg.machine, job, &operand, ran.ticks());
            g.results.insert(work, (res, members));
        }
        let (res, left) = g.results.get_mut(&work)?;
        let res = res.clone();
        *left -= 1;
        if *left == 0 {
            g.results.remove(&work);
        }
        Some(res)
    }

    /// A collective over `group` on tensor `t`, like torch.distributed's,
    /// element-wise over the group's ranks shard by shard (one lane per
    /// shard position; over every shard of every member for a
    /// `DPPolicy::replicas` tensor, see [`DPPolicy`]): joins
    /// the group's next epoch and returns once every member has joined and the
    /// collective has run; the result's time is the collective's own. A
    /// broadcast or reduce roots at the group's first rank.
    pub fn collective(
        &mut self,
        group: GroupId,
        collective: Collective,
        t: &Tensor,
        op: ReduceOp,
    ) -> Result<CollResult, DistError> {
        let w = self.collective_async(group, collective, t, op)?;
        self.wait_collective(&w)
    }

    /// [`Rank::collective`] with `async_op=True`: joins the group's next
    /// epoch on this rank's current communication stream and returns at
    /// once. The collective leaves the host when its last member joins (at
    /// the latest member clock), after the work each member put before it on
    /// that stream has ended; [`Rank::wait`] gives its measures.
    pub fn collective_async(
        &mut self,
        group: GroupId,
        collective: Collective,
        t: &Tensor,
        op: ReduceOp,
    ) -> Result<Work, DistError> {
        self.rooted(group, collective, t, op, 0)
    }

    /// Waits for a collective of this rank and gives its measures.
    fn wait_collective(&mut self, w: &Work) -> Result<CollResult, DistError> {
        let done = self.wait(w)?;
        done.collective.ok_or_else(|| {
            DistError::Run(format!(
                "{w} finished without its measures: a collective's measures are read by each member once"
            ))
        })
    }

    /// [`Rank::collective_async`] rooted at the group's member `root` (its
    /// place in the group's ranks): the collective runs on the group turned
    /// to start there (see the process group's `comm_for`).
    fn rooted(
        &mut self,
        group: GroupId,
        collective: Collective,
        t: &Tensor,
        op: ReduceOp,
        root: u32,
    ) -> Result<Work, DistError> {
        let g = self.enter()?;
        t.check_f16(collective.name()).map_err(DistError::Config)?;
        let (job, operand) = Self::check_tensor(&g, t)?;
        let has_root = matches!(collective, Collective::Broadcast | Collective::Reduce);
        let call = Call {
            what: collective.name(),
            bytes: job.bytes(),
            op: if collective.reduces() { op.name() } else { "" },
            root: has_root.then(|| g.pg.group(group).ranks[root as usize]),
            base: operand.buffers.base,
            pe_stride: operand.buffers.pe_stride,
        };
        let job = Job {
            collective,
            op,
            ..job
        };
        self.join(g, group, call, (job, root), operand)
    }

    /// Joins a collective's epoch on the current communication stream and
    /// puts it in this rank's order (on its group's participants of this
    /// rank's SIP); the last member submits it.
    fn join(
        &self,
        mut g: MutexGuard<'_, Sched<'p>>,
        group: GroupId,
        call: Call,
        (job, root): (Job, u32),
        operand: Operand,
    ) -> Result<Work, DistError> {
        let (rank, r) = (self.rank, self.rank as usize);
        let (sip, _, _) = self.device_sip(&g);
        let joined = g.join_epoch(group.0, rank, call)?;
        let s = &mut *g;
        let (stream, seq, at) = (s.current[r][1], s.seq[r], s.host[r]);
        let prev = s.follow(stream, joined.work);
        let rg = &s.pg.groups[group.0];
        let what = format!(
            "{} #{} of group '{}'",
            job.collective.name(),
            joined.epoch,
            rg.name
        );
        let pes: Vec<PeIdx> = (0..rg.members.size())
            .filter(|&p| rg.members.coords(p).0 == sip)
            .map(|p| rg.members.pe(p))
            .collect();
        s.enqueue(rank, joined.work, pes, what);
        s.unwaited.entry(joined.work).or_default().push(rank);
        let gather = s.gathers.entry(joined.work).or_insert(Gather {
            at,
            key: (rank, seq),
            after: Vec::new(),
        });
        gather.at = gather.at.max(at);
        gather.key = gather.key.min((rank, seq));
        gather.after.extend(prev);
        if joined.complete {
            self.submit_collective(s, group, joined.work, (job, root), operand)?;
        }
        let handle = Work {
            id: joined.work,
            rank,
            kind: WorkKind::Collective {
                group: group.0,
                job,
            },
            stream,
            seq,
        };
        s.note(handle);
        Ok(handle)
    }

    /// The last member's join: the collective's programs on the
    /// communicator that runs it, submitted at the latest member clock.
    fn submit_collective(
        &self,
        s: &mut Sched<'p>,
        group: GroupId,
        work: u64,
        (job, root): (Job, u32),
        operand: Operand,
    ) -> Result<(), DistError> {
        let gather = s.gathers.remove(&work).unwrap_or(Gather {
            at: s.host[self.rank as usize],
            key: (self.rank, s.seq[self.rank as usize]),
            after: Vec::new(),
        });
        let busy = s.busy_scopes();
        let (comm, install) = s.pg.comm_for(group, root, &job, &operand, &busy)?;
        let programs = comm.trace_operand(&s.pg.machine, job, &operand)?;
        s.works.insert(work, WorkState::Pending);
        s.pending.push(Submission {
            at: gather.at,
            rank: gather.key.0,
            seq: gather.key.1,
            work,
            programs,
            scope: comm.scope,
            install,
            members: s.pg.groups[group.0].ranks.clone(),
            after: gather.after,
        });
        s.comms.insert(work, (comm, operand));
        Ok(())
    }

    /// What a collective on `t` runs: one shard's job and the operand.
    /// A tensor without `DPPolicy::replicas` runs lane-wise (each shard
    /// position its own collective over the ranks, on the shard's own
    /// offset, see [`DPPolicy`]): its shards must be the same size. A
    /// replicas tensor runs on every participant of the group (the replica
    /// reduction): its shards must be the mapper's participants (the
    /// default validator), shard (cube, pe) at one offset per pe. Either
    /// way the tensor lives in HBM and passes the validator ccl.yaml names,
    /// if any.
    fn check_tensor(g: &Sched, t: &Tensor) -> Result<(Job, Operand), DistError> {
        let elems = (t.shards[0].nbytes / 2) as usize;
        let job = Job {
            collective: Collective::AllReduce,
            op: ReduceOp::Sum,
            elems,
        };
        if g.pg.unit == RankUnit::Pe {
            // One shard per rank, in its PE's TCM (Rank::empty makes that).
            if t.shards.len() != 1 || t.space != Space::Tcm {
                return Err(DistError::Layout(format!(
                    "in the rank = flat PE mode a collective's tensor is one shard in its PE's TCM; rank {}'s has {} shard(s) in {}: create it with Rank::empty and DPPolicy::cube_rows(1)",
                    t.rank,
                    t.shards.len(),
                    t.space.name()
                )));
            }
            let buffers = Buffers {
                space: Space::Tcm,
                base: t.shards[0].addr,
                pe_stride: 0,
            };
            let lanes = None;
            return Ok((job, Operand { buffers, lanes }));
        }
        let cfg = &g.pg.config;
        let validator = match &cfg.validator {
            Some(name) => Some(name.as_str()),
            None => t
                .policy
                .replicas
                .then(|| layout::default_validator(&cfg.mapper)),
        };
        let m = &g.pg.machine;
        let (cps, ppc) = (m.topology.cubes_per_sip(), m.topology.pes_per_cube);
        if let Some(name) = validator {
            layout::validator(name).map_err(DistError::Config)?(t, cps, ppc)
                .map_err(DistError::Layout)?;
        }
        if t.space != Space::Hbm {
            return Err(DistError::Layout(format!(
                "the tensor of rank {} ({}) lives in {}; collectives read their buffers from HBM: create it with Rank::empty",
                t.rank,
                t.policy.describe(),
                t.space.name()
            )));
        }
        if t.policy.replicas {
            let buffers = Self::shard_offsets(t)?;
            return Ok((
                job,
                Operand {
                    buffers,
                    lanes: None,
                },
            ));
        }
        layout::lanes(t).map_err(DistError::Layout)?;
        let lane = |s: &super::tensor::Shard| LaneBuffer {
            cube: s.cube,
            pe: s.pe,
            base: s.addr,
        };
        let lanes = Some(t.shards.iter().map(lane).collect());
        let buffers = Buffers::hbm(t.shards[0].addr, 0);
        Ok((job, Operand { buffers, lanes }))
    }

    /// The buffers of `t`'s shards: shard (cube, pe) at base + pe · stride,
    /// the same in every cube (so one offset per lane on every rank that
    /// allocated in the same order).
    fn shard_offsets(t: &Tensor) -> Result<Buffers, DistError> {
        let base = t.shards[0].addr;
        let stride = t
            .shards
            .get(1)
            .filter(|s| s.cube == 0)
            .map_or(0, |s| s.addr.saturating_sub(base));
        let at = |pe: u32| base + u64::from(pe) * stride;
        if let Some(s) = t.shards.iter().find(|s| s.addr != at(s.pe)) {
            return Err(DistError::Layout(format!(
                "the shard of rank {}'s tensor ({}) on cube {} pe {} sits at HBM offset {}, not {}: collective buffers must sit at the same offsets in every cube (pe0's at {base}, pe q's {stride} B further per q): allocate collective tensors first, in the same order on every rank",
                t.rank,
                t.policy.describe(),
                s.cube,
                s.pe,
                s.addr,
                at(s.pe)
            )));
        }
        Ok(Buffers::hbm(base, stride))
    }

    /// `all_reduce` over every rank.
    pub fn all_reduce(&mut self, t: &Tensor, op: ReduceOp) -> Result<CollResult, DistError> {
        let w = self.all_reduce_async(t, op)?;
        self.wait_collective(&w)
    }

    /// [`Rank::all_reduce`] with `async_op=True`: a [`Work`] to wait for.
    pub fn all_reduce_async(&mut self, t: &Tensor, op: ReduceOp) -> Result<Work, DistError> {
        self.collective_async(WORLD, Collective::AllReduce, t, op)
    }

    /// `reduce_scatter` over every rank, shard by shard: rank k keeps block
    /// k (of one per member) of each shard's reduction (with
    /// `DPPolicy::replicas`: participant p, rank · cubes + cube, keeps block p).
    pub fn reduce_scatter(&mut self, t: &Tensor, op: ReduceOp) -> Result<CollResult, DistError> {
        let w = self.reduce_scatter_async(t, op)?;
        self.wait_collective(&w)
    }

    /// [`Rank::reduce_scatter`] with `async_op=True`.
    pub fn reduce_scatter_async(&mut self, t: &Tensor, op: ReduceOp) -> Result<Work, DistError> {
        self.collective_async(WORLD, Collective::ReduceScatter, t, op)
    }

    /// `all_gather` over every rank, shard by shard: rank k contributes block
    /// k (of one per member) of each shard (with `DPPolicy::replicas`:
    /// participant p contributes block p).
    pub fn all_gather(&mut self, t: &Tensor) -> Result<CollResult, DistError> {
        let w = self.all_gather_async(t)?;
        self.wait_collective(&w)
    }

    /// [`Rank::all_gather`] with `async_op=True`.
    pub fn all_gather_async(&mut self, t: &Tensor) -> Result<Work, DistError> {
        self.collective_async(WORLD, Collective::AllGather, t, ReduceOp::Sum)
    }

    /// `all_to_all` over every rank, shard by shard: each shard is one block
    /// per member, and rank k's block j becomes rank j's block k of the same
    /// shard (nccl's ncclAllToAll, in place; with `DPPolicy::replicas`, per
    /// participant instead of per rank).
    pub fn all_to_all(&mut self, t: &Tensor) -> Result<CollResult, DistError> {
        let w = self.all_to_all_async(t)?;
        self.wait_collective(&w)
    }

    /// [`Rank::all_to_all`] with `async_op=True`.
    pub fn all_to_all_async(&mut self, t: &Tensor) -> Result<Work, DistError> {
        self.collective_async(WORLD, Collective::AllToAll, t, ReduceOp::Sum)
    }

    /// `broadcast` from rank `root` over every rank: every rank's `t` ends
    /// as the root's, each shard from the root's same shard (with
    /// `DPPolicy::replicas`: every shard as the root's first cube's, as the
    /// library's broadcast sends participant 0's).
    pub fn broadcast(&mut self, t: &Tensor, root: u32) -> Result<CollResult, DistError> {
        let w = self.broadcast_async(t, root)?;
        self.wait_collective(&w)
    }

    /// [`Rank::broadcast`] with `async_op=True`.
    pub fn broadcast_async(&mut self, t: &Tensor, root: u32) -> Result<Work, DistError> {
        let root = self.world_member(Collective::Broadcast, root)?;
        self.rooted(WORLD, Collective::Broadcast, t, ReduceOp::Sum, root)
    }

    /// `reduce` to rank `root` over every rank: the root's `t` ends as the
    /// reduction of every rank's.
    pub fn reduce(&mut self, t: &Tensor, op: ReduceOp, root: u32) -> Result<CollResult, DistError> {
        let w = self.reduce_async(t, op, root)?;
        self.wait_collective(&w)
    }

    /// [`Rank::reduce`] with `async_op=True`.
    pub fn reduce_async(&mut self, t: &Tensor, op: ReduceOp, root: u32) -> Result<Work, DistError> {
        let root = self.world_member(Collective::Reduce, root)?;
        self.rooted(WORLD, Collective::Reduce, t, op, root)
    }

    /// Rank `root`'s place in the world group: the rank itself, if it
    /// exists and, in the rank = flat PE mode (where the library roots at a
    /// SIP's first PE), is rank 0.
    fn world_member(&self, collective: Collective, root: u32) -> Result<u32, DistError> {
        let g = self.enter()?;
        let n = g.pg.world_size;
        if root >= n {
            return Err(DistError::Config(format!(
                "{collective} root {root}: the world has ranks 0..{n}; allowed: a root below {n}"
            )));
        }
        if g.pg.unit == RankUnit::Pe && root != 0 {
            return Err(DistError::Config(format!(
                "{collective} root {root} in the rank = flat PE mode: the collective library roots at a SIP's first PE; allowed: root 0, or one rank per SIP (a world_size of at most the SIP count)"
            )));
        }
        Ok(root)
    }
}
