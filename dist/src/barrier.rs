//! The epoch barrier of collective calls, so ranks match calls in order: every
//! call of a group's members joins the earliest epoch not yet complete; a
//! member joins an epoch at most once; the epoch completes when every member
//! has joined, and only if they all made the same call.

use std::collections::BTreeMap;
use std::fmt;

/// What a member asked for: compared across members of an epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `all_reduce`, `barrier`, …
    pub what: &'static str,
    pub bytes: u64,
    /// `sum`, `max`, `min`, or empty.
    pub op: &'static str,
    /// The root rank of a broadcast or reduce.
    pub root: Option<u32>,
    /// HBM offset of the member's buffer (collectives need it the same on
    /// every member), and the distance between the buffers of one cube's PEs
    /// when every PE takes part (0 otherwise).
    pub base: u64,
    pub pe_stride: u64,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({} B", self.what, self.bytes)?;
        if !self.op.is_empty() {
            write!(f, ", {}", self.op)?;
        }
        if let Some(root) = self.root {
            write!(f, ", root {root}")?;
        }
        write!(f, ", buffer at offset {}", self.base)?;
        if self.pe_stride > 0 {
            write!(f, " + pe x {}", self.pe_stride)?;
        }
        f.write_str(")")
    }
}

/// One epoch: who joined with which call, and the work it became.
#[derive(Debug, Clone, Default)]
pub struct Epoch {
    pub joined: BTreeMap<u32, Call>,
    /// The runtime's work id that every member waits on.
    pub work: u64,
}

/// A joined epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    pub epoch: u64,
    pub work: u64,
    /// This join opened the epoch (its work id is the one offered).
    pub opened: bool,
    /// This join was the last: the collective can start.
    pub complete: bool,
}

/// The barrier of one group of `members` ranks.
#[derive(Debug, Clone)]
pub struct EpochBarrier {
    members: Vec<u32>,
    /// Epochs not yet complete, by number.
    open: BTreeMap<u64, Epoch>,
    /// The number of the next epoch to open.
    next: u64,
}

impl EpochBarrier {
    pub fn new(members: Vec<u32>) -> Self {
        Self {
            members,
            open: BTreeMap::new(),
            next: 0,
        }
    }

    /// Joins the earliest incomplete epoch `rank` has not joined yet (a rank
    /// may have joined several, asynchronously), with `call`; an epoch this
    /// join opens takes `new_work` as its work id. Errors: a rank outside
    /// the group, a call that differs from the others'.
    pub fn join(
        &mut self,
        rank: u32,
        call: Call,
        group: &str,
        new_work: u64,
    ) -> Result<Joined, String> {
        if !self.members.contains(&rank) {
            return Err(format!(
                "rank {rank} called {call} on group '{group}', which it is not a member of (ranks {:?})",
                self.members
            ));
        }
        let epoch = self
            .open
            .iter()
            .find(|(_, e)| !e.joined.contains_key(&rank))
            .map_or(self.next, |(&k, _)| k);
        let opened = !self.open.contains_key(&epoch);
        if opened {
            self.next = epoch + 1;
        }
        let e = self.open.entry(epoch).or_insert_with(|| Epoch {
            joined: BTreeMap::new(),
            work: new_work,
        });
        if let Some((first, theirs)) = e.joined.iter().next()
            && *theirs != call
        {
            let others: Vec<String> = e.joined.keys().map(|r| r.to_string()).collect();
            return Err(format!(
                "mismatched collectives in group '{group}': as its collective #{epoch}, rank(s) {} called {theirs} but rank {rank} called {call}; every member must make the same calls in the same order (rank {first} was first)",
                others.join(", ")
            ));
        }
        e.joined.insert(rank, call);
        let (work, complete) = (e.work, e.joined.len() == self.members.len());
        if complete {
            self.open.remove(&epoch);
        }
        Ok(Joined {
            epoch,
            work,
            opened,
            complete,
        })
    }

    /// The open epoch, if some members wait in it.
    pub fn waiting(&self) -> Option<(u64, &Epoch)> {
        self.open.iter().next().map(|(&k, e)| (k, e))
    }

    pub fn members(&self) -> &[u32] {
        &self.members
    }

    /// Forgets every open epoch (after a failed spawn), so the group can be used again.
    pub fn reset(&mut self) {
        self.open.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(what: &'static str, bytes: u64) -> Call {
        Call {
            what,
            bytes,
            op: "sum",
            root: None,
            base: 0,
            pe_stride: 0,
        }
    }

    #[test]
    fn epochs_complete_in_order_and_stay_isolated() {
        let mut b = EpochBarrier::new(vec![0, 1]);
        let a = b.join(1, call("all_reduce", 8), "g", 10).unwrap();
        assert_eq!(
            (a.epoch, a.work, a.opened, a.complete),
            (0, 10, true, false)
        );
        let a = b.join(0, call("all_reduce", 8), "g", 11).unwrap();
        assert_eq!(
            (a.epoch, a.work, a.opened, a.complete),
            (0, 10, false, true)
        );
        let c = b.join(0, call("all_gather", 4), "g", 11).unwrap();
        assert_eq!(
            (c.epoch, c.work, c.opened, c.complete),
            (1, 11, true, false)
        );
        assert_eq!(b.waiting().unwrap().0, 1);
    }

    #[test]
    fn a_second_join_opens_the_next_epoch_and_a_mismatch_is_named() {
        let mut b = EpochBarrier::new(vec![0, 1, 2]);
        let w = 0;
        b.join(0, call("all_reduce", 8), "world", w).unwrap();
        let again = b.join(0, call("all_reduce", 8), "world", 1).unwrap();
        assert_eq!((again.epoch, again.work, again.opened), (1, 1, true));
        let e = b.join(2, call("all_gather", 8), "world", w).unwrap_err();
        assert_eq!(
            e,
            "mismatched collectives in group 'world': as its collective #0, rank(s) 0 called all_reduce(8 B, sum, buffer at offset 0) but rank 2 called all_gather(8 B, sum, buffer at offset 0); every member must make the same calls in the same order (rank 0 was first)"
        );
        let e = b.join(5, call("all_reduce", 8), "world", w).unwrap_err();
        assert!(e.starts_with("rank 5 called all_reduce"), "{e}");
        b.reset();
        assert!(b.waiting().is_none());
    }
}
