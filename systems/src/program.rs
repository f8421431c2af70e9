//! Op programs: what a traced kernel becomes, and what `kernel_step` runs.
//!
//! A program is straight-line code over a small register file of f16 tiles.
//! The tracer (crate `kernbench`, `kernel/`) resolves addresses and control
//! flow at trace time, so the engine sees only concrete ops.

/// A register index of a program.
pub type Reg = u16;

/// IPCQ directions. Each has an opposite, used to pair the two ends of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QDir {
    N,
    E,
    S,
    W,
    GlobalN,
    GlobalE,
    GlobalS,
    GlobalW,
    IntraN,
    IntraE,
    IntraS,
    IntraW,
    /// Logical channel `k`, for partners that are not compass neighbours
    /// (trees, recursive doubling). Its opposite is itself.
    Chan(u8),
}

impl QDir {
    pub const ALL: [QDir; 12] = [
        QDir::N,
        QDir::E,
        QDir::S,
        QDir::W,
        QDir::GlobalN,
        QDir::GlobalE,
        QDir::GlobalS,
        QDir::GlobalW,
        QDir::IntraN,
        QDir::IntraE,
        QDir::IntraS,
        QDir::IntraW,
    ];

    /// N↔S, E↔W, global_N↔global_S, global_E↔global_W, intra_N↔intra_S,
    /// intra_E↔intra_W, chan k ↔ chan k.
    pub fn opposite(self) -> QDir {
        use QDir::*;
        match self {
            Chan(k) => Chan(k),
            N => S,
            S => N,
            E => W,
            W => E,
            GlobalN => GlobalS,
            GlobalS => GlobalN,
            GlobalE => GlobalW,
            GlobalW => GlobalE,
            IntraN => IntraS,
            IntraS => IntraN,
            IntraE => IntraW,
            IntraW => IntraE,
        }
    }

    pub fn name(self) -> std::borrow::Cow<'static, str> {
        use QDir::*;
        std::borrow::Cow::Borrowed(match self {
            Chan(k) => return format!("chan{k}").into(),
            N => "N",
            E => "E",
            S => "S",
            W => "W",
            GlobalN => "global_N",
            GlobalE => "global_E",
            GlobalS => "global_S",
            GlobalW => "global_W",
            IntraN => "intra_N",
            IntraE => "intra_E",
            IntraS => "intra_S",
            IntraW => "intra_W",
        })
    }

    pub fn parse(s: &str) -> Option<QDir> {
        if let Some(k) = s.strip_prefix("chan") {
            return k.parse().ok().map(QDir::Chan);
        }
        QDir::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// A memory space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// Per-PE scratchpad.
    Tcm,
    /// Per-cube SRAM.
    Sram,
    /// Per-cube HBM.
    Hbm,
}

impl Space {
    pub const ALL: [Space; 3] = [Space::Tcm, Space::Sram, Space::Hbm];

    pub fn name(self) -> &'static str {
        ["tcm", "sram", "hbm"][self as usize]
    }
}

/// A memory location: a memory instance and a byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemLoc {
    pub space: Space,
    /// Global PE index for TCM, global cube index for SRAM and HBM, or
    /// [`MemLoc::LOCAL`]: the executing PE's own TCM / its cube's SRAM or HBM.
    /// Local locations keep a traced program the same on every PE.
    pub instance: u32,
    pub offset: u64,
}

impl MemLoc {
    pub const LOCAL: u32 = u32::MAX;

    /// The concrete location for PE `pe` (global index) with `pes_per_cube` PEs per cube.
    pub fn resolve(self, pe: u32, pes_per_cube: u32) -> MemLoc {
        if self.instance != Self::LOCAL {
            return self;
        }
        let instance = match self.space {
            Space::Tcm => pe,
            Space::Sram | Space::Hbm => pe / pes_per_cube,
        };
        MemLoc { instance, ..self }
    }
}

/// Elementwise binary operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Max,
    Min,
}

impl BinOp {
    pub fn name(self) -> &'static str {
        ["add", "sub", "mul", "max", "min"][self as usize]
    }
}

/// One op of a program.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `dst ← memory[src .. src + elems]`.
    Load { dst: Reg, src: MemLoc, elems: u64 },
    /// `memory[dst ..] ← src`.
    Store { src: Reg, dst: MemLoc },
    /// Send a register through the IPCQ of direction `dir`.
    Send { dir: QDir, src: Reg },
    /// Receive `elems` elements from the IPCQ of direction `dir`.
    Recv { dir: QDir, dst: Reg, elems: u64 },
    /// `dst ← a ∘ b`, elementwise.
    Binary { op: BinOp, dst: Reg, a: Reg, b: Reg },
    /// `dst ← src · factor` (factor rounded to f16 like the data).
    Scale { dst: Reg, src: Reg, factor: f32 },
    /// `dst ← src`.
    Copy { dst: Reg, src: Reg },
    /// `dst[m×n] ← a[m×k] · b[k×n]`, row-major, f32 accumulation.
    Gemm {
        dst: Reg,
        a: Reg,
        b: Reg,
        m: u32,
        n: u32,
        k: u32,
    },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Load { .. } => "load",
            Op::Store { .. } => "store",
            Op::Send { .. } => "send",
            Op::Recv { .. } => "recv",
            Op::Binary { op, .. } => op.name(),
            Op::Scale { .. } => "scale",
            Op::Copy { .. } => "copy",
            Op::Gemm { .. } => "gemm",
        }
    }

    /// Registers read.
    pub fn inputs(&self) -> ([Reg; 2], usize) {
        match *self {
            Op::Store { src, .. } | Op::Send { src, .. } => ([src, 0], 1),
            Op::Scale { src, .. } | Op::Copy { src, .. } => ([src, 0], 1),
            Op::Binary { a, b, .. } | Op::Gemm { a, b, .. } => ([a, b], 2),
            Op::Load { .. } | Op::Recv { .. } => ([0, 0], 0),
        }
    }

    /// Register written.
    pub fn output(&self) -> Option<Reg> {
        match *self {
            Op::Load { dst, .. }
            | Op::Recv { dst, .. }
            | Op::Binary { dst, .. }
            | Op::Scale { dst, .. }
            | Op::Copy { dst, .. }
            | Op::Gemm { dst, .. } => Some(dst),
            Op::Store { .. } | Op::Send { .. } => None,
        }
    }
}

/// A traced program: ops over `regs` registers. A register's size is that of
/// the value last written to it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub ops: Vec<Op>,
    pub regs: u16,
}
