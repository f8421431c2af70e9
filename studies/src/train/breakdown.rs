//! A step's breakdown from each rank's record of works (`Rank::record_works`, `Rank::take_work_record`):
//! compute, communication (each kind apart), the part of it hidden under
//! compute, and the idle time — neither computing nor communicating —
//! split into the pipeline bubble and the other gaps.

use kernbench_dist::{WorkClass, WorkRecord};
use kernbench_systems::Tick;
use std::collections::BTreeMap;

/// One rank's step, in ticks, over the step's common window:
/// `step = compute + communication − hidden + bubble + gaps`.
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
    /// Idle waiting on the pipeline: before the rank's first work, after
    /// its last, and each idle stretch that ends as a message from another
    /// stage arrives (a `recv` starts).
    pub bubble: Tick,
    /// The rest of the idle time: launch overhead between kernels, the host
    /// waiting, peers joining a collective.
    pub gaps: Tick,
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

/// The stretches of `[begin, end)` no interval covers.
fn idle(busy: &[(Tick, Tick)], (begin, end): (Tick, Tick)) -> Vec<(Tick, Tick)> {
    let mut v = busy.to_vec();
    v.sort_unstable();
    let (mut out, mut reach) = (Vec::new(), begin);
    for (s, e) in v {
        if s > reach {
            out.push((reach, s));
        }
        reach = reach.max(e);
    }
    if end > reach {
        out.push((reach, end));
    }
    out
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
        let both = [compute.clone(), comm.clone()].concat();
        let (computing, communication) = (covered(compute), covered(comm));
        let busy = covered(both.clone());
        let hidden = computing + communication - busy;
        let mut by_kind = BTreeMap::new();
        for r in record.iter().filter(|r| r.class != WorkClass::Compute) {
            by_kind
                .entry(r.class.name())
                .or_insert_with(Vec::new)
                .push(clip(r));
        }
        let recvs: Vec<Tick> = record
            .iter()
            .filter(|r| r.class == WorkClass::Transfer("recv"))
            .map(|r| r.start)
            .collect();
        let bubble = idle(&both, (begin, end))
            .into_iter()
            .filter(|&(s, e)| s == begin || e == end || recvs.contains(&e))
            .map(|(s, e)| e - s)
            .sum();
        RankBreakdown {
            rank,
            step: end - begin,
            compute: computing,
            communication,
            hidden,
            exposed: communication - hidden,
            bubble,
            gaps: end - begin - busy - bubble,
            by_kind: by_kind.into_iter().map(|(k, v)| (k, covered(v))).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_is_what_no_interval_covers() {
        assert_eq!(idle(&[(5, 9), (2, 4)], (0, 12)), [(0, 2), (4, 5), (9, 12)]);
        assert_eq!(idle(&[(0, 12)], (0, 12)), []);
    }

    #[test]
    fn covered_merges_overlaps() {
        assert_eq!(covered(vec![(5, 9), (0, 3), (2, 4), (9, 10)]), 9);
    }
}
