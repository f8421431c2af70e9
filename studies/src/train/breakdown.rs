//! A step's breakdown from each rank's record of works (`Rank::record_works`, `Rank::take_work_record`):
//! compute, communication (each kind apart), the part of it hidden under
//! compute, and the pipeline bubble — time a rank neither computes nor
//! communicates within the step.

use kernbench_dist::{WorkClass, WorkRecord};
use kernbench_systems::Tick;
use std::collections::BTreeMap;

/// One rank's step, in ticks, over the step's common window:
/// `step = compute + communication − hidden + bubble`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct RankBreakdown {
    pub rank: u32,
    pub step: Tick,
    /// Some kernel of the rank running.
    pub compute: Tick,
    /// Some collective or message of the rank running.
    pub communication: Tick,
    /// Communication while a kernel ran.
    pub hidden: Tick,
    /// Communication while no kernel ran: communication − hidden.
    pub exposed: Tick,
    /// Neither computing nor communicating: the pipeline bubble, and the
    /// gaps between kernels (launch overhead, waits on the host).
    pub bubble: Tick,
    /// Communication by kind (`all_reduce`, `send`, …): each kind's own
    /// covered time.
    pub by_kind: BTreeMap<&'static str, Tick>,
}

/// Total length of the union of intervals (a rank busy over several
/// works at once counts each tick once).
pub fn covered(mut v: Vec<(Tick, Tick)>) -> Tick {
    v.sort_unstable();
    let (mut sum, mut reach) = (0, 0);
    for (s, e) in v {
        let s = s.max(reach);
        if e > s {
            sum += e - s;
            reach = e;
        }
    }
    sum
}

impl RankBreakdown {
    /// The breakdown of `record`'s works clipped to `[begin, end)`.
    pub fn of(rank: u32, record: &[WorkRecord], (begin, end): (Tick, Tick)) -> RankBreakdown {
        let clip = |r: &WorkRecord| (r.start.clamp(begin, end), r.end.clamp(begin, end));
        let of = |f: &dyn Fn(&WorkRecord) -> bool| -> Vec<(Tick, Tick)> {
            record.iter().filter(|r| f(r)).map(clip).collect()
        };
        let compute = of(&|r| r.class == WorkClass::Compute);
        let comm = of(&|r| r.class != WorkClass::Compute);
        let busy = covered([compute.clone(), comm.clone()].concat());
        let (compute, communication) = (covered(compute), covered(comm));
        let hidden = compute + communication - busy;
        let mut by_kind = BTreeMap::new();
        for r in record.iter().filter(|r| r.class != WorkClass::Compute) {
            by_kind
                .entry(r.class.name())
                .or_insert_with(Vec::new)
                .push(clip(r));
        }
        RankBreakdown {
            rank,
            step: end - begin,
            compute,
            communication,
            hidden,
            exposed: communication - hidden,
            bubble: end - begin - busy,
            by_kind: by_kind.into_iter().map(|(k, v)| (k, covered(v))).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covered_merges_overlaps() {
        assert_eq!(covered(vec![(5, 9), (0, 3), (2, 4), (9, 10)]), 9);
    }
}
