//! The cost vocabulary of an algorithm: what it answers
//! [`Algorithm::cost_terms`](super::Algorithm::cost_terms) in, and the
//! counts of a group those answers are made of. `estimate` (above ccl)
//! turns the terms into memory and time.

use super::{Collective, Group};

/// What the estimate needs to know of one run of an algorithm, answered by
/// the algorithm itself ([`Algorithm::cost_terms`](crate::Algorithm::cost_terms);
/// docs/model.md §Cost estimate gives each one's reasoning).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostTerms {
    /// Sends per participant, before pipelining.
    pub sends: f64,
    /// Bytes per send, before pipelining.
    pub bytes_per_send: f64,
    /// Stages of the longest chain a send is forwarded along piece by
    /// piece (tree levels, a ring's broadcast chain); 1 without chains.
    pub stages: usize,
    /// How many participants act on the same ticks, so that one schedule
    /// run serves them all (fitted to the counts of tests/it/estimate.rs
    /// and the default sweep).
    pub lockstep: f64,
    /// Register pieces a participant holds per pipeline chunk (a ring step:
    /// a block's tiles in two banks, 1).
    pub register_pieces: f64,
    /// The programs its participants hold.
    pub programs: HeldPrograms,
    /// Routes a participant sends on at once, whose messages drain
    /// together (1 for algorithms that send to one peer at a time).
    pub fanout: f64,
    /// How many messages a participant has in flight at its peak.
    pub in_flight: InFlight,
}

/// The messages (loads, chunks, credits) a participant has in flight at
/// once, which the network holds until they land: a participant issues ops
/// until one needs a value not yet received, so what it can issue before
/// that wait sets the count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InFlight {
    /// About this many, whatever the pipeline depth: each step waits for
    /// its peer's chunk (a looped ring).
    Messages(f64),
    /// Every piece of this many sends at once: their loads wait for
    /// nothing (a tree leaf loads its whole buffer before it sends).
    Sends(f64),
}

impl InFlight {
    /// Messages in flight per participant when each send is cut into `pieces`.
    pub fn messages(self, pieces: f64) -> f64 {
        match self {
            InFlight::Messages(m) => m,
            InFlight::Sends(s) => s * pieces,
        }
    }
}

/// The programs an algorithm's participants hold, whose ops stay in memory
/// for the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HeldPrograms {
    /// `programs` distinct programs that step in loops: `ops_per_chunk`
    /// ops per pipeline chunk, whatever the participants' count.
    Looped { programs: f64, ops_per_chunk: f64 },
    /// `programs` distinct unrolled programs, each as long as a
    /// participant's traced ops.
    Unrolled { programs: f64 },
}

impl HeldPrograms {
    /// Ops held, given a participant's traced ops and the pipeline chunks.
    pub fn ops(self, ops_per_participant: f64, chunks: f64) -> f64 {
        match self {
            HeldPrograms::Looped {
                programs,
                ops_per_chunk,
            } => programs * ops_per_chunk * chunks,
            HeldPrograms::Unrolled { programs } => programs * ops_per_participant,
        }
    }
}

impl CostTerms {
    /// The terms of a direct block exchange traced unrolled, one program
    /// per participant: each participant sends its blocks once
    /// ([`block_sends`]), no chain, one register piece. Its exchanges with
    /// peers at every distance share links unevenly, so participants do not
    /// act on the same ticks (counted 0.3-2.2 messages a schedule run on
    /// 4-64 participants of rings and tori).
    pub fn unrolled_blocks(g: &Group, c: Collective, bytes: f64) -> CostTerms {
        let (sends, bytes_per_send) = block_sends(g, c, bytes);
        CostTerms {
            sends,
            bytes_per_send,
            stages: 1,
            lockstep: 1.0,
            register_pieces: 1.0,
            programs: HeldPrograms::Unrolled {
                programs: g.size() as f64,
            },
            fanout: 1.0,
            // Most of a line's exchanges load before their first receive
            // (measured: half to three quarters on 32-256 participants); a
            // broadcast or reduce sends its one buffer.
            in_flight: InFlight::Sends((0.75 * sends).max(1.0)),
        }
    }
}

/// Participants of `g` (at least 1), as the cost terms count them.
pub fn participants(g: &Group) -> f64 {
    g.size().max(1) as f64
}

/// ⌈log2 p⌉ of `g`'s participants, at least 1: the levels of a binomial
/// tree, the steps of a halving or Bruck exchange.
pub fn log2_levels(g: &Group) -> f64 {
    participants(g).log2().ceil().max(1.0)
}

/// Sends per participant and their size when every participant sends each
/// other one a block (S/p): all-reduce twice (reduce-scatter then
/// all-gather, 2(p − 1)), reduce-scatter, all-gather and all-to-all once
/// (p − 1); broadcast and reduce: one send of the whole buffer.
pub fn block_sends(g: &Group, c: Collective, bytes: f64) -> (f64, f64) {
    let p = participants(g);
    match c {
        Collective::AllReduce => (2.0 * (p - 1.0), bytes / p),
        Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll => {
            (p - 1.0, bytes / p)
        }
        Collective::Broadcast | Collective::Reduce => (1.0, bytes),
    }
}
