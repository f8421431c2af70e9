//! Out-of-place collectives: the algorithms work in place, so an
//! out-of-place call (nccl's separate `recvbuff`) is modelled as the
//! in-place collective followed, on each participant, by a simulated copy of
//! its result into a separate output buffer in its cube's HBM
//! (docs/model.md §Collectives, out-of-place). Both launches run on the
//! machine; the time runs from the collective's first start to the last copy.

use super::{Buffers, CclError, CollResult, Collective, Communicator, Group, Job};
use kernbench_runtime::kernel::{Addr, Index, Part, Tl};
use kernbench_runtime::machine::{LaunchHandle, Machine};
use kernbench_runtime::memory_map::BUFFER_ALIGN;
use kernbench_spec::topology::address::Space;
use kernbench_systems::PeIdx;

/// Where a collective leaves its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// nccl-tests' "out-of-place": the result lands in a separate buffer.
    OutOfPlace,
    /// The result overwrites the input buffer.
    InPlace,
}

impl Placement {
    /// Both, in the order nccl-tests prints them.
    pub const ALL: [Placement; 2] = [Placement::OutOfPlace, Placement::InPlace];

    pub fn name(self) -> &'static str {
        match self {
            Placement::OutOfPlace => "out_of_place",
            Placement::InPlace => "in_place",
        }
    }
}

/// What the copy kernel of participant buffers needs.
#[derive(Debug, Clone)]
struct CopyArgs {
    group: Group,
    job: Job,
    from: Buffers,
    to: Buffers,
    /// Elements per copy piece: loads of piece i + 1 overlap the store of piece i.
    piece_elems: usize,
}

/// The elements of participant `p`'s result: the whole buffer, or its own
/// block for reduce-scatter (as [`super::verify::first_mismatch`] checks it).
fn result_range(job: &Job, n: usize, p: usize) -> (usize, usize) {
    match job.collective {
        Collective::ReduceScatter => super::kernels::split(job.elems, n)[p],
        _ => (0, job.elems),
    }
}

/// Copies this participant's result from `from` to `to`, piece by piece,
/// loading the next piece before storing the current one.
fn copy_kernel(tl: &mut Tl, a: &CopyArgs) {
    let n = a.group.size();
    let (sip, cube, pe) = (tl.program_id(0), tl.program_id(1), tl.program_id(2));
    let p = a.group.participant_at(sip, cube, pe);
    let (_, len) = result_range(&a.job, n, p);
    let pieces = len.div_ceil(a.piece_elems.max(1)).max(1);
    let pe = if a.group.pes == 1 {
        0
    } else {
        u64::from(tl.program_id(2))
    };
    let block = match a.job.collective {
        Collective::ReduceScatter => vec![(Index::At(tl.param(p as i64)), n)],
        _ => Vec::new(),
    };
    let part = |b: Buffers, i: Index| Part {
        base: Addr::Local(Space::Hbm, b.base + pe * b.pe_stride),
        elems: a.job.elems,
        digits: [block.clone(), vec![(i, pieces)]].concat(),
    };
    let first = tl.load_part(&part(a.from, Index::from(0usize)));
    let last = tl.repeat(pieces - 1, &[first], |tl, i, held| {
        let next = tl.load_part(&part(a.from, Index::At(i + 1usize)));
        tl.store_part(&part(a.to, Index::At(i)), held[0]);
        vec![next]
    });
    tl.store_part(&part(a.to, Index::from(pieces - 1)), last[0]);
}

impl Communicator {
    /// Where the output buffers of an out-of-place run start in each cube's
    /// HBM: right after the input buffers of the cube's participants.
    pub fn output_base(&self, job: &Job) -> u64 {
        Self::pe_stride(job) * u64::from(self.group.pes)
    }

    /// Runs `job` with its result `placement`d: [`Communicator::run`] or
    /// [`Communicator::run_out_of_place`].
    pub fn run_placed(
        &self,
        machine: &mut Machine,
        job: Job,
        placement: Placement,
    ) -> Result<CollResult, CclError> {
        match placement {
            Placement::InPlace => self.run(machine, job),
            Placement::OutOfPlace => self.run_out_of_place(machine, job),
        }
    }

    /// The HBM offset of the results of a run with `placement`.
    pub fn result_base(&self, job: &Job, placement: Placement) -> u64 {
        match placement {
            Placement::InPlace => 0,
            Placement::OutOfPlace => self.output_base(job),
        }
    }

    /// Refuses a job that cannot run out of place: what [`Communicator::check`]
    /// refuses, or an output buffer that does not fit beside the input.
    pub fn check_out_of_place(&self, machine: &Machine, job: &Job) -> Result<(), CclError> {
        self.check(machine, job)?;
        self.check_output_fits(machine, job)
    }

    /// Runs `job` out of place (see the module doc) on buffers at HBM offset
    /// 0 and [`Communicator::output_base`]; in functional mode also writes
    /// the inputs, clears the outputs and checks them.
    pub fn run_out_of_place(
        &self,
        machine: &mut Machine,
        job: Job,
    ) -> Result<CollResult, CclError> {
        self.check_output_fits(machine, &job)?;
        let functional = self.prepare_run(machine, &job)?;
        let from = Buffers::hbm(0, Self::pe_stride(&job));
        let to = Buffers::hbm(self.output_base(&job), from.pe_stride);
        if functional {
            self.clear(machine, &job, to.base)?;
        }
        let coll = self.submit(machine, job, from, 0)?;
        let copy = self.submit_copy(machine, job, from, to)?;
        machine.synchronize()?;
        let (c, k) = (machine.wait(coll)?, machine.wait(copy)?);
        let ticks = c.end.max(k.end) - c.start.min(k.start);
        let verified = functional.then(|| self.first_mismatch_at(machine, &job, to.base).is_none());
        Ok(self.result(machine, job, ticks, verified))
    }

    /// The copy launch, queued on each participant behind its collective
    /// (reduce: the root only, the one participant with a result).
    fn submit_copy(
        &self,
        machine: &mut Machine,
        job: Job,
        from: Buffers,
        to: Buffers,
    ) -> Result<LaunchHandle, CclError> {
        let pes: Vec<PeIdx> = match job.collective {
            Collective::Reduce => vec![self.group.pe(0)],
            _ => self.group.simulated().map(|p| self.group.pe(p)).collect(),
        };
        let args = CopyArgs {
            group: self.group.clone(),
            job,
            from,
            to,
            piece_elems: (self.config.slot_size / 2) as usize,
        };
        let programs = machine.trace(copy_kernel, &args, &pes)?;
        Ok(machine.submit_programs(programs, self.scope, 0)?)
    }

    /// Zeroes every participant's buffer at `base`, so a copy that never
    /// happened cannot pass on an earlier run's values.
    fn clear(&self, machine: &mut Machine, job: &Job, base: u64) -> Result<(), CclError> {
        let zeros = vec![half::f16::ZERO; job.elems];
        for p in self.group.simulated() {
            machine
                .write(self.hbm_at(p, job, base), &zeros)
                .map_err(|e| {
                    CclError::Config(format!("clearing the output of participant {p}: {e}"))
                })?;
        }
        Ok(())
    }

    /// Input and output buffers must both fit below the slot areas.
    fn check_output_fits(&self, machine: &Machine, job: &Job) -> Result<(), CclError> {
        let m = &machine.memory;
        let need = 2 * self.output_base(job);
        let free = self
            .group
            .simulated()
            .map(|p| {
                let hbm = m.instance_of(Space::Hbm, self.group.pe(p));
                m.free_below(Space::Hbm, hbm)
            })
            .min()
            .unwrap_or(u64::MAX);
        if need <= free {
            return Ok(());
        }
        Err(CclError::Config(format!(
            "{} of {} B per participant out of place needs an input and an output buffer per participant ({need} B of each cube's HBM) and {free} B are free below the IPCQ slot areas; allowed: at most {} B per participant, or a larger memory.hbm.size_bytes",
            job.collective,
            job.bytes(),
            free / (2 * u64::from(self.group.pes)) / BUFFER_ALIGN * BUFFER_ALIGN,
        )))
    }

    /// Elements of every participant's result at `base` (0: in place,
    /// [`Communicator::output_base`]: out of place) that differ from the
    /// reference: nccl-tests' `#wrong`. Functional mode only.
    pub fn wrong_elements(&self, machine: &Machine, job: &Job, base: u64) -> u64 {
        let n = self.group.size();
        (0..n)
            .map(|p| {
                let got = machine
                    .read(self.hbm_at(p, job, base), job.elems)
                    .expect("buffer written");
                super::verify::count_wrong(job, n, p, &got)
            })
            .sum()
    }
}
