//! What a collective call is: the operation ([`Collective`]), its reduction
//! ([`ReduceOp`]) and one call over a buffer size ([`Job`]), with the
//! nccl-tests bus factor and the checks of a size before anything runs.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A collective operation.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast,
    Reduce,
    AllToAll,
}

impl Collective {
    pub const ALL: [Collective; 6] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
    ];

    /// Every collective but all-to-all: what a ring (reduce-scatter,
    /// all-gather) and its chains (broadcast, reduce) implement.
    pub const RING: [Collective; 5] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::Reduce,
    ];

    pub fn name(self) -> &'static str {
        [
            "all_reduce",
            "reduce_scatter",
            "all_gather",
            "broadcast",
            "reduce",
            "all_to_all",
        ][self as usize]
    }

    /// nccl-tests bus-bandwidth factor for `n` participants.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::Reduce => 1.0,
        }
    }

    pub fn reduces(self) -> bool {
        !matches!(
            self,
            Collective::AllGather | Collective::Broadcast | Collective::AllToAll
        )
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The reduction of reducing collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        ["sum", "max", "min"][self as usize]
    }

    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

/// One collective call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub collective: Collective,
    pub op: ReduceOp,
    /// f16 elements of each participant's buffer (the nccl "count"; for
    /// all-gather and reduce-scatter, of the full buffer).
    pub elems: usize,
}

impl Job {
    pub fn bytes(&self) -> u64 {
        self.elems as u64 * 2
    }

    /// The f16 element count of a buffer of `bytes` per participant: a size
    /// must be a positive whole number of elements. Err is (problem, allowed).
    pub fn elems_of(bytes: u64) -> Result<usize, (String, String)> {
        if bytes == 0 || !bytes.is_multiple_of(2) {
            return Err((
                format!("{bytes} B is not a positive whole number of f16 elements"),
                "an even number of bytes >= 2 (2 bytes per element), e.g. 1K, 64M".into(),
            ));
        }
        usize::try_from(bytes / 2).map_err(|_| {
            (
                format!("{bytes} B is too large for this machine"),
                "a smaller size".into(),
            )
        })
    }

    /// Checks the job against its pipeline depth before anything runs:
    /// `chunks` may not exceed the elements of the buffer (beyond that every
    /// extra piece is empty and only costs simulation time).
    pub fn check(&self, chunks: u32) -> Result<(), (String, String)> {
        Self::elems_of(self.bytes())?;
        if chunks as usize > self.elems {
            return Err((
                format!(
                    "chunks {chunks} is more than the {} elements of the buffer",
                    self.elems
                ),
                format!(
                    "chunks from 1 to {} at this size, or a larger size",
                    self.elems
                ),
            ));
        }
        Ok(())
    }
}
