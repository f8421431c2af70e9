//! The order submissions reach the engine in. Two rules, as on a GPU:
//!
//! - **A stream runs in order**: a submission leaves the host once the work
//!   each of its members submitted last on the same stream has ended.
//! - **A PE receives a rank's work in the rank's order**: a submission is
//!   handed over only after every earlier submission of each of its members
//!   that shares one of its PEs (a collective: its group's participants),
//!   and leaves the host no earlier than them; on the PE, launches queue in
//!   arrival order.
//!
//! Among submissions these allow, the earliest departure goes first, then
//! the lowest (rank, seq): an order independent of the workers' turns. When
//! members' orders contradict each other (rank 0 submitted X then Y, rank 1
//! Y then X, on one stream or on shared PEs) neither can ever go;
//! [`Sched::conflict`] names them.

use super::spawn::{Queued, Sched, Submission, WorkState};
use super::work::Stream;
use kernbench_systems::{PeIdx, Tick};
use std::collections::BTreeSet;

/// Whether two sorted PE lists share a PE.
fn shares(a: &[PeIdx], b: &[PeIdx]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// What holds a submission back: the work, the rank whose order puts it
/// first, and how (`"on its stream"` or `"on shared PEs"`).
type Blocker = (u64, u32, &'static str);

impl Sched<'_> {
    /// Appends `work`, running on `pes`, to `rank`'s order.
    pub fn enqueue(&mut self, rank: u32, work: u64, mut pes: Vec<PeIdx>, what: String) {
        pes.sort_unstable();
        pes.dedup();
        self.queued[rank as usize].push(Queued { work, pes, what });
    }

    /// Makes `work` the last on `stream`; the one before it, with its rank.
    pub fn follow(&mut self, stream: Stream, work: u64) -> Option<(u64, u32)> {
        self.tails[stream.rank as usize]
            .insert(stream.id, work)
            .map(|w| (w, stream.rank))
    }

    /// What keeps `s` from the engine, if anything.
    fn blocker(&self, s: &Submission) -> Option<Blocker> {
        if let Some(&(w, r)) = s.after.iter().find(|(w, _)| self.works.contains_key(w)) {
            return Some((w, r, "on its stream"));
        }
        s.members.iter().find_map(|&m| {
            let q = &self.queued[m as usize];
            let i = q.iter().position(|e| e.work == s.work)?;
            q[..i]
                .iter()
                .find(|e| shares(&e.pes, &q[i].pes))
                .map(|e| (e.work, m, "on shared PEs"))
        })
    }

    /// Forgets when works ended that every member has waited for and that
    /// no submission follows, or may yet follow, on its stream: what a long
    /// program keeps stays bounded.
    pub(super) fn prune(&mut self) {
        let tails = self.tails.iter().flat_map(|t| t.values());
        let pending = self.pending.iter().flat_map(|s| &s.after);
        let gathering = self.gathers.values().flat_map(|g| &g.after);
        let followed: BTreeSet<u64> = tails
            .copied()
            .chain(pending.chain(gathering).map(|a| a.0))
            .collect();
        let unwaited = &self.unwaited;
        self.ended
            .retain(|w, _| unwaited.contains_key(w) || followed.contains(w));
    }

    /// When `s` leaves the host: its own time, or later when its stream's
    /// previous work ended later or an earlier message to one of its PEs
    /// left later.
    fn departure(&self, s: &Submission) -> Tick {
        let after = s.after.iter().filter_map(|(w, _)| self.ended.get(w));
        let pes = s.programs.iter().filter_map(|(pe, _)| self.pe_sent.get(pe));
        after
            .map(|r| r.end)
            .chain(pes.copied())
            .fold(s.at, Tick::max)
    }

    /// Hands the engine every submission nothing holds back, earliest
    /// departure first (then rank, seq). A submission on a communicator not
    /// yet installed goes last: its tables leave the host at its time and
    /// the engine runs (everything else already submitted alongside) until
    /// they land; then its launch leaves. Err: the install failed.
    pub(super) fn flush(&mut self) -> Result<(), String> {
        loop {
            let next = self
                .pending
                .iter()
                .enumerate()
                .filter(|(_, s)| self.blocker(s).is_none())
                .min_by_key(|(_, s)| (s.install.is_some(), self.departure(s), s.rank, s.seq))
                .map(|(i, _)| i);
            let Some(i) = next else {
                return Ok(());
            };
            let s = self.pending.swap_remove(i);
            self.hand(s)?;
        }
    }

    fn hand(&mut self, s: Submission) -> Result<(), String> {
        let mut at = self.departure(&s);
        if let Some(tables) = s.install {
            at = at.max(
                self.pg
                    .machine
                    .land_scope(s.scope, tables, at)
                    .map_err(|e| e.to_string())?,
            );
        }
        for (pe, _) in &s.programs {
            self.pe_sent.insert(*pe, at);
        }
        for &m in &s.members {
            self.queued[m as usize].retain(|e| e.work != s.work);
        }
        let h = self
            .pg
            .machine
            .submit_programs(s.programs, s.scope, at)
            .map_err(|e| e.to_string())?;
        self.works.insert(s.work, WorkState::Running(h, s.scope));
        Ok(())
    }

    /// How errors name work `w`.
    fn name_of(&self, w: u64) -> String {
        self.queued
            .iter()
            .flatten()
            .find(|e| e.work == w)
            .map_or_else(|| format!("work #{w}"), |e| e.what.clone())
    }

    /// Submissions that hold each other back for ever, named with the
    /// members whose orders contradict (what NCCL would hang on).
    pub(super) fn conflict(&self) -> Option<String> {
        self.pending.iter().find_map(|s| self.cycle_from(s))
    }

    /// The cycle of blockers reached from `s`, described, if there is one.
    fn cycle_from<'a>(&'a self, mut s: &'a Submission) -> Option<String> {
        let mut chain: Vec<(u64, Blocker)> = Vec::new();
        while let Some(b) = self.blocker(s) {
            chain.push((s.work, b));
            if let Some(i) = chain.iter().position(|(w, _)| *w == b.0) {
                return Some(self.describe(&chain[i..]));
            }
            s = self.pending.iter().find(|p| p.work == b.0)?;
        }
        None
    }

    fn describe(&self, cycle: &[(u64, Blocker)]) -> String {
        let edges: Vec<String> = cycle
            .iter()
            .map(|&(w, (b, rank, how))| {
                format!(
                    "rank {rank} submitted {} before {} {how}",
                    self.name_of(b),
                    self.name_of(w)
                )
            })
            .collect();
        format!(
            "the ranks' orders contradict each other, so none of these can ever start (NCCL would hang): {}; allowed: every member submits collectives that share a stream or PEs in the same order",
            edges.join(", but ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_lists_share_only_a_common_pe() {
        let pes = |v: &[u32]| v.iter().map(|&p| PeIdx(p)).collect::<Vec<_>>();
        assert!(shares(&pes(&[0, 3, 9]), &pes(&[1, 9])));
        assert!(!shares(&pes(&[0, 3]), &pes(&[1, 2, 4])));
        assert!(!shares(&pes(&[]), &pes(&[1])));
    }
}
