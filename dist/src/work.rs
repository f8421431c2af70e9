//! Streams and works, as in torch.cuda / torch.distributed: a [`Stream`] is
//! an ordered queue of a rank's work (a compute and a communication stream
//! per rank by default), a [`Work`] is one launch or one collective a rank
//! submitted, and [`WorkReport`] is what waiting for it gives.

use kernbench_ccl::{CollResult, Collective, Job};
use kernbench_systems::Tick;

/// What a stream carries by default: kernel launches go on the current
/// compute stream, collectives on the current communication stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamKind {
    Compute,
    Communication,
}

impl StreamKind {
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::Compute => "compute",
            StreamKind::Communication => "communication",
        }
    }
}

/// A stream of one rank: its work runs in submission order, each piece
/// starting no earlier than the previous one on the stream ended; work on
/// different streams may overlap (docs/model.md §Streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stream {
    pub(super) rank: u32,
    /// 0: the rank's default compute stream, 1: its default communication
    /// stream, 2 and up: streams made by `Rank::new_stream`.
    pub(super) id: u32,
    pub(super) kind: StreamKind,
}

impl Stream {
    /// The default stream of `kind` of `rank`.
    pub(super) fn default_of(rank: u32, kind: StreamKind) -> Stream {
        let id = match kind {
            StreamKind::Compute => 0,
            StreamKind::Communication => 1,
        };
        Stream { rank, id, kind }
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn kind(&self) -> StreamKind {
        self.kind
    }

    /// The stream's number within its rank (0 and 1: the defaults).
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl std::fmt::Display for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} stream {} of rank {}",
            self.kind.name(),
            self.id,
            self.rank
        )
    }
}

/// What a work is: a kernel launch, or a collective (with what its
/// measures need).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WorkKind {
    Launch,
    Collective {
        group: usize,
        job: Job,
    },
    /// One end of a point-to-point message: `send` or `recv`.
    Transfer {
        what: &'static str,
    },
}

/// A launch or a collective of one rank, submitted and not necessarily
/// done (torch's `Work` of `async_op=True`): pass it to `Rank::wait`, or
/// ask `Rank::is_completed`. It belongs to the rank that made it and is
/// waited for once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "wait for a work to learn when it ran"]
pub struct Work {
    pub(super) id: u64,
    pub(super) rank: u32,
    pub(super) kind: WorkKind,
    pub(super) stream: Stream,
    /// The rank's count of submissions and joins at this one: how errors
    /// name it (the same whatever order the workers take turns in).
    pub(super) seq: u64,
}

impl Work {
    /// What this work is, for a record.
    pub fn class(&self) -> WorkClass {
        match self.kind {
            WorkKind::Launch => WorkClass::Compute,
            WorkKind::Collective { job, .. } => WorkClass::Collective(job.collective),
            WorkKind::Transfer { what } => WorkClass::Transfer(what),
        }
    }

    /// The process group's number of this work (a collective's is the
    /// same on every member).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The rank that submitted it.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The stream it runs on.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Whether it is a collective.
    pub fn is_collective(&self) -> bool {
        matches!(self.kind, WorkKind::Collective { .. })
    }
}

impl std::fmt::Display for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            WorkKind::Launch => "launch".to_string(),
            WorkKind::Transfer { what } => what.to_string(),
            WorkKind::Collective { job, .. } => job.collective.name().to_string(),
        };
        write!(f, "{what} (submission {} of rank {})", self.seq, self.rank)
    }
}

/// What a recorded work was: a kernel launch, a collective, or one end
/// (`send` or `recv`) of a point-to-point message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkClass {
    Compute,
    Collective(Collective),
    Transfer(&'static str),
}

impl WorkClass {
    /// Its name: `compute`, the collective's (`all_reduce`, …), `send` or `recv`.
    pub fn name(&self) -> &'static str {
        match self {
            WorkClass::Compute => "compute",
            WorkClass::Collective(c) => c.name(),
            WorkClass::Transfer(what) => what,
        }
    }
}

/// One work a rank waited for: what it was, the stream it ran on, and
/// when it ran (its first PE's start to its last PE's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRecord {
    pub class: WorkClass,
    pub stream: Stream,
    pub start: Tick,
    pub end: Tick,
}

/// When a work ran (its first PE's start to its last PE's end) and, for a
/// collective, its measures.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkReport {
    pub start: Tick,
    pub end: Tick,
    /// The collective's result (time, bandwidths, bound); None for a launch.
    pub collective: Option<CollResult>,
}

impl WorkReport {
    pub fn ticks(&self) -> Tick {
        self.end - self.start
    }
}
