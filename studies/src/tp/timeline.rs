//! Where a rank's time goes: the intervals its kernels and collectives ran,
//! and the breakdown of its wall time they give.

use crate::train::breakdown::covered;
use kernbench_ccl::CollResult;
use kernbench_dist::{DistError, Rank, Work, WorkReport};
use kernbench_systems::Tick;

/// A rank's kernels and collectives since [`Timeline::start`].
#[derive(Debug, Clone)]
pub struct Timeline {
    begin: Tick,
    compute: Vec<(Tick, Tick)>,
    comm: Vec<(Tick, Tick)>,
    /// The configuration each collective ran (under `auto`, the pick).
    ran: Vec<String>,
}

/// A rank's wall time split four ways, in ticks:
/// `total = compute + communication − hidden + launch`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakdown {
    /// From [`Timeline::start`] to the rank's clock now.
    pub total: Tick,
    /// Some kernel (GEMM, bias add, lookup) of the rank running.
    pub compute: Tick,
    /// Some collective of the rank running, each its own time
    /// (first PE start to last PE finish).
    pub communication: Tick,
    /// Communication that ran while a kernel ran.
    pub hidden: Tick,
    /// Neither: launch latency (host to PE, launch overhead) and waiting
    /// for the other members of a collective.
    pub launch: Tick,
}

impl Timeline {
    /// Starts timing at the rank's host clock.
    pub fn start(ctx: &Rank) -> Timeline {
        Timeline {
            begin: ctx.now(),
            compute: Vec::new(),
            comm: Vec::new(),
            ran: Vec::new(),
        }
    }

    /// Waits for a kernel launch and records when it ran.
    pub fn kernel(&mut self, ctx: &mut Rank, w: Work) -> Result<WorkReport, DistError> {
        let r = ctx.wait(&w)?;
        self.compute.push((r.start, r.end));
        Ok(r)
    }

    /// Waits for an asynchronous collective and records when it ran (its
    /// first PE's start to its last PE's end, as the engine measured them).
    pub fn collective_work(&mut self, ctx: &mut Rank, w: Work) -> Result<CollResult, DistError> {
        let r = ctx.wait(&w)?;
        let res = r.collective.ok_or_else(|| {
            DistError::Config(format!(
                "Timeline::collective_work of {w}, a kernel launch; allowed: a collective's Work (time launches with Timeline::kernel)"
            ))
        })?;
        self.comm.push((r.start, r.end));
        self.ran.push(res.algorithm.clone());
        Ok(res)
    }

    /// Records a collective that just returned (it ended at the rank's clock).
    pub fn collective(&mut self, ctx: &Rank, r: CollResult) -> CollResult {
        let end = ctx.now();
        self.comm.push((end - r.ticks, end));
        self.ran.push(r.algorithm.clone());
        r
    }

    /// The configuration each collective ran, in order (under `auto`, the
    /// tuner's pick).
    pub fn collective_configs(&self) -> Vec<String> {
        self.ran.clone()
    }

    /// The collectives' own times, in order.
    pub fn collective_ticks(&self) -> Vec<Tick> {
        self.comm.iter().map(|(s, e)| e - s).collect()
    }

    /// The breakdown up to the rank's clock now.
    pub fn breakdown(&self, ctx: &Rank) -> Breakdown {
        let total = ctx.now() - self.begin;
        let compute = covered(self.compute.clone());
        let communication = covered(self.comm.clone());
        let busy = covered([self.compute.clone(), self.comm.clone()].concat());
        Breakdown {
            total,
            compute,
            communication,
            hidden: compute + communication - busy,
            launch: total - busy,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn covered_merges_overlaps() {
        assert_eq!(super::covered(vec![(5, 9), (0, 3), (2, 4), (9, 10)]), 9);
        assert_eq!(super::covered(vec![]), 0);
    }
}
