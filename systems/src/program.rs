//! Op programs: what a traced kernel becomes, and what `kernel_step` runs.
//!
//! A program is code over a small register file of tiles, each of one dtype
//! ([`DType`]): straight-line
//! ops and counted loops ([`Op::Loop`]). The tracer (crate `kernbench`,
//! `kernel/`) resolves control flow at trace time. What differs between the
//! PEs that share a program — a ring position, the block a step works on —
//! is an [`Affine`] of the PE's parameters and the loop iteration, evaluated
//! as each op issues, so one program serves every participant of a role and
//! its length does not grow with the number of steps.
//!
//! Layout: plain data, no entity and no resource; a launched program lives
//! on its PE's `PeExec` (shared by `Arc`).

/// A register index of a program.
pub type Reg = u16;

pub use crate::dtype::DType;

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

/// A memory space; also what a ccl config's `buffer_kind` names (`tcm`, `sram`, `hbm`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
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

    /// The space named `s` (`tcm`, `sram`, `hbm`).
    pub fn parse(s: &str) -> Option<Space> {
        Space::ALL.into_iter().find(|sp| sp.name() == s)
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
    pub fn resolve(self, pe: crate::ids::PeIdx, pes_per_cube: u32) -> MemLoc {
        if self.instance != Self::LOCAL {
            return self;
        }
        let instance = match self.space {
            Space::Tcm => pe.0,
            Space::Sram | Space::Hbm => pe.0 / pes_per_cube,
        };
        MemLoc { instance, ..self }
    }
}

/// An integer computed per PE and loop iteration:
/// `c + coeff · params[param] + step · i`, where `i` is the iteration of the
/// enclosing loop (0 outside loops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Affine {
    pub c: i64,
    pub param: u8,
    pub coeff: i64,
    pub step: i64,
}

impl Affine {
    pub fn constant(c: i64) -> Affine {
        Affine {
            c,
            ..Affine::default()
        }
    }

    pub fn eval(&self, params: &[i64], iter: u32) -> i64 {
        let p = if self.coeff == 0 {
            0
        } else {
            params.get(self.param as usize).copied().unwrap_or(0)
        };
        self.c + self.coeff * p + self.step * i64::from(iter)
    }
}

/// One digit of an atom's mixed-radix index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Digit {
    /// The value mod the digit's radix.
    Affine(Affine),
    /// `tables[table][value mod table length]`: a permutation such as a ring order.
    Table { table: u16, index: Affine },
}

/// An atom of a buffer split level by level: the buffer of `elems` f16 at
/// `base` splits into `radix` blocks per digit, the first `len % radix` one
/// element longer (so the atoms tile the buffer in order).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AtomExpr {
    pub base: MemLoc,
    pub elems: u64,
    /// (digit, radix), outermost level first.
    pub digits: Vec<(Digit, u32)>,
}

impl AtomExpr {
    /// Whether every atom has the same length (every level splits evenly),
    /// whatever the PE and iteration.
    pub fn uniform(&self) -> bool {
        let mut len = self.elems;
        self.digits.iter().all(|&(_, radix)| {
            let r = u64::from(radix).max(1);
            let even = len.is_multiple_of(r);
            len /= r;
            even
        })
    }

    /// The atom's location and length for a PE with `params` at loop iteration `iter`.
    pub fn eval(
        &self,
        params: &[i64],
        iter: u32,
        tables: &[std::sync::Arc<[u32]>],
    ) -> (MemLoc, u64) {
        let (mut off, mut len) = (0u64, self.elems);
        for (d, radix) in &self.digits {
            let r = u64::from(*radix).max(1);
            let v = match d {
                Digit::Affine(a) => a.eval(params, iter).rem_euclid(r as i64) as u64,
                Digit::Table { table, index } => {
                    let t = &tables[*table as usize];
                    let i = index.eval(params, iter).rem_euclid(t.len().max(1) as i64);
                    u64::from(t.get(i as usize).copied().unwrap_or(0)).min(r - 1)
                }
            };
            let (q, rem) = (len / r, len % r);
            off += v * q + v.min(rem);
            len = q + u64::from(v < rem);
        }
        let loc = MemLoc {
            offset: self.base.offset + off * DType::F16.bytes(),
            ..self.base
        };
        (loc, len)
    }
}

/// Where a load or store's data sits and how many elements it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// A fixed location (a local one resolves to the executing PE's memory).
    Fixed { loc: MemLoc, elems: u64 },
    /// `Program::atoms[k]`, computed per PE and iteration.
    Atom(u32),
    /// `Program::rects[k]`: a rectangle of a row-major matrix. Held by the
    /// program, not the op, so ops stay 32 bytes on the stepping path.
    Rect(u32),
}

/// A rectangle of a row-major matrix: `rows` runs of `cols` elements, the
/// first at `loc`, each `pitch` elements after the one before (a
/// two-dimensional DMA descriptor: a GEMM tile of a larger matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemRect {
    pub loc: MemLoc,
    pub rows: u32,
    pub cols: u32,
    pub pitch: u32,
    /// The descriptor's transpose flag: a load lands the rectangle as its
    /// transpose (`cols` rows of `rows`), at the cost of the same load (the
    /// DMA engine writes TCM column-wise). Loads only.
    pub transposed: bool,
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

    /// Its name as a row-broadcast op ([`Op::RowBroadcast`]).
    pub fn row_name(self) -> &'static str {
        ["row_add", "row_sub", "row_mul", "row_max", "row_min"][self as usize]
    }
}

/// Elementwise functions of one operand, computed in f32 and rounded once
/// to the operand's dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `e^x`.
    Exp,
    /// GELU, tanh form: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    Gelu,
    /// `1 / √x`.
    Rsqrt,
    /// `1 / x`.
    Recip,
    /// The derivative of [`UnOp::Gelu`] (tanh form), for GELU's backward.
    GeluGrad,
}

impl UnOp {
    pub fn name(self) -> &'static str {
        ["exp", "gelu", "rsqrt", "recip", "gelu_grad"][self as usize]
    }

    /// Passes over the vector unit, each `⌈elems / vector_lanes⌉` ticks (a
    /// pass is one multiply-add per lane; docs/model.md §Kernels derives
    /// each count).
    pub fn passes(self) -> u64 {
        match self {
            UnOp::Exp => 4,
            UnOp::Gelu => 12,
            UnOp::Rsqrt => 4,
            UnOp::Recip => 3,
            UnOp::GeluGrad => 16,
        }
    }

    /// The function on an f32.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            UnOp::Exp => x.exp(),
            UnOp::Gelu => {
                let inner = (2.0 / std::f32::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                0.5 * x * (1.0 + inner.tanh())
            }
            UnOp::Rsqrt => 1.0 / x.sqrt(),
            UnOp::Recip => 1.0 / x,
            UnOp::GeluGrad => {
                let c = (2.0 / std::f32::consts::PI).sqrt();
                let t = (c * (x + 0.044715 * x * x * x)).tanh();
                let du = c * (1.0 + 3.0 * 0.044715 * x * x);
                0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
            }
        }
    }
}

/// Reductions of each row of a register to one element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduce {
    /// The row's largest element.
    Max,
    /// The row's sum, accumulated in f32.
    Sum,
}

impl Reduce {
    pub fn name(self) -> &'static str {
        ["row_max", "row_sum"][self as usize]
    }
}

/// One op of a program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// `dst ← memory[src]`, elements of `dtype`.
    Load { dst: Reg, src: Place, dtype: DType },
    /// `memory[dst ..] ← src` (the register's elements).
    Store { src: Reg, dst: Place },
    /// Send a register through the IPCQ of direction `dir`.
    Send { dir: QDir, src: Reg },
    /// Receive as many elements of `dtype` as `size` covers from the IPCQ
    /// of direction `dir`.
    Recv {
        dir: QDir,
        dst: Reg,
        size: Place,
        dtype: DType,
    },
    /// `dst ← a ∘ b`, elementwise.
    Binary { op: BinOp, dst: Reg, a: Reg, b: Reg },
    /// `dst ← src · factor` (factor rounded to the data's dtype).
    Scale { dst: Reg, src: Reg, factor: f32 },
    /// `dst ← f(src + shift)`, elementwise (`shift` in f32: layer norm's ε
    /// under a square root).
    Unary {
        op: UnOp,
        dst: Reg,
        src: Reg,
        shift: f32,
    },
    /// `dst[r] ← reduction of src[r, ..]` for a register of rows of `cols`.
    RowReduce {
        op: Reduce,
        dst: Reg,
        src: Reg,
        cols: u32,
    },
    /// `dst[r, c] ← a[r, c] ∘ b[r]`: each row of `cols` elements of `a`
    /// with its row's scalar of `b`.
    RowBroadcast {
        op: BinOp,
        dst: Reg,
        a: Reg,
        b: Reg,
        cols: u32,
    },
    /// `dst ← src`.
    Copy { dst: Reg, src: Reg },
    /// `dst ← src` rounded to `to`: one vector pass.
    Cast { dst: Reg, src: Reg, to: DType },
    /// `dst[m×n] ← a[m×k] · b[k×n]`, row-major: operands of one dtype,
    /// products summed in f32 and rounded once to `out`.
    Gemm {
        dst: Reg,
        a: Reg,
        b: Reg,
        m: u32,
        n: u32,
        k: u32,
        out: DType,
    },
    /// Runs the next `len` ops `count` times. In odd iterations registers
    /// `rot .. rot + rot_len` and `rot + rot_len .. rot + 2·rot_len` trade
    /// names, so a value carried from one iteration to the next is read from
    /// where the previous iteration wrote it. Loops do not nest.
    Loop {
        count: u32,
        len: u32,
        rot: Reg,
        rot_len: u16,
    },
    /// The PE works for `ticks` and touches nothing: a kernel replaced by
    /// the time it was measured to take alone (the measured compute model).
    Busy { ticks: u64 },
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
            Op::Unary { op, .. } => op.name(),
            Op::RowReduce { op, .. } => op.name(),
            Op::RowBroadcast { op, .. } => op.row_name(),
            Op::Copy { .. } => "copy",
            Op::Cast { .. } => "cast",
            Op::Gemm { .. } => "gemm",
            Op::Loop { .. } => "loop",
            Op::Busy { .. } => "busy",
        }
    }

    /// Registers read.
    pub fn inputs(&self) -> ([Reg; 2], usize) {
        match *self {
            Op::Store { src, .. } | Op::Send { src, .. } => ([src, 0], 1),
            Op::Scale { src, .. } | Op::Copy { src, .. } => ([src, 0], 1),
            Op::Cast { src, .. } => ([src, 0], 1),
            Op::Unary { src, .. } | Op::RowReduce { src, .. } => ([src, 0], 1),
            Op::Binary { a, b, .. } | Op::Gemm { a, b, .. } => ([a, b], 2),
            Op::RowBroadcast { a, b, .. } => ([a, b], 2),
            Op::Load { .. } | Op::Recv { .. } | Op::Loop { .. } | Op::Busy { .. } => ([0, 0], 0),
        }
    }

    /// Register written.
    pub fn output(&self) -> Option<Reg> {
        match *self {
            Op::Load { dst, .. }
            | Op::Recv { dst, .. }
            | Op::Binary { dst, .. }
            | Op::Scale { dst, .. }
            | Op::Unary { dst, .. }
            | Op::RowReduce { dst, .. }
            | Op::RowBroadcast { dst, .. }
            | Op::Copy { dst, .. }
            | Op::Cast { dst, .. }
            | Op::Gemm { dst, .. } => Some(dst),
            Op::Store { .. } | Op::Send { .. } | Op::Loop { .. } | Op::Busy { .. } => None,
        }
    }
}

/// A traced program: ops over `regs` registers (a register's size is that of
/// the value last written to it), the atom expressions its places name and
/// the tables its digits index. Every PE running it has its own parameters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub ops: Vec<Op>,
    pub regs: u16,
    pub atoms: Vec<AtomExpr>,
    pub rects: Vec<MemRect>,
    pub tables: Vec<std::sync::Arc<[u32]>>,
}

impl Program {
    /// Ops in the program (a loop counts its body once).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// A place's concrete location and size for a PE with `params` at iteration `iter`.
    pub fn place(&self, p: Place, params: &[i64], iter: u32) -> (MemLoc, u64) {
        match p {
            Place::Fixed { loc, elems } => (loc, elems),
            Place::Rect(k) => {
                let r = self.rects[k as usize];
                (r.loc, u64::from(r.rows) * u64::from(r.cols))
            }
            Place::Atom(k) => self.atoms[k as usize].eval(params, iter, &self.tables),
        }
    }

    /// A resolved place as `(loc, rows, cols, pitch)`: a fixed run is one
    /// row. None for an atom, which `PeExec::op` resolves before issue.
    pub fn rect(&self, p: Place) -> Option<(MemLoc, u64, u64, u64)> {
        match p {
            Place::Fixed { loc, elems } => Some((loc, 1, elems, elems)),
            Place::Rect(k) => {
                let r = self.rects[k as usize];
                Some((r.loc, r.rows.into(), r.cols.into(), r.pitch.into()))
            }
            Place::Atom(_) => None,
        }
    }

    /// Whether a load from `p` lands transposed ([`MemRect::transposed`]).
    pub fn transposed(&self, p: Place) -> bool {
        matches!(p, Place::Rect(k) if self.rects[k as usize].transposed)
    }
}

/// What a PE is launched with: a program (shared) and its own parameter values.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: std::sync::Arc<Program>,
    pub params: Box<[i64]>,
}

/// Ops are read on every issue: keep them two to a cache line.
const _: () = assert!(std::mem::size_of::<Op>() == 32);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn expr(elems: u64, digits: Vec<(Digit, u32)>) -> AtomExpr {
        AtomExpr {
            base: MemLoc {
                space: Space::Hbm,
                instance: MemLoc::LOCAL,
                offset: 64,
            },
            elems,
            digits,
        }
    }

    /// Atoms of every digit combination tile the buffer in order, larger blocks first.
    #[test]
    fn atoms_tile_the_buffer_in_order() {
        let (radices, elems) = ([2u32, 3, 2], 100u64);
        let mut next = 0;
        for a in 0..2 {
            for b in 0..3 {
                for c in 0..2 {
                    let d = |v: i64| Digit::Affine(Affine::constant(v));
                    let e = expr(
                        elems,
                        vec![(d(a), radices[0]), (d(b), radices[1]), (d(c), radices[2])],
                    );
                    let (loc, len) = e.eval(&[], 0, &[]);
                    assert_eq!(loc.offset, 64 + 2 * next, "atom {a}{b}{c}");
                    next += len;
                }
            }
        }
        assert_eq!(next, elems);
        let first = expr(10, vec![(Digit::Affine(Affine::constant(0)), 4)]);
        assert_eq!(first.eval(&[], 0, &[]).1, 3);
    }

    /// Digits follow the PE's parameter and the loop iteration, mod the radix or through a table.
    #[test]
    fn digits_follow_parameters_iterations_and_tables() {
        let rotating = Affine {
            c: -1,
            param: 1,
            coeff: 1,
            step: -1,
        };
        assert_eq!(rotating.eval(&[0, 5], 2), 2);
        let e = expr(8, vec![(Digit::Affine(rotating), 8)]);
        // params[1] = 0, iteration 3: (0 − 3 − 1) mod 8 = 4.
        assert_eq!(e.eval(&[9, 0], 3, &[]).0.offset, 64 + 2 * 4);
        let table: Arc<[u32]> = vec![3, 0, 2, 1].into();
        let t = expr(
            4,
            vec![(
                Digit::Table {
                    table: 0,
                    index: Affine { c: 1, ..rotating },
                },
                4,
            )],
        );
        // Index 1 + 5 − 2 = 4, mod the table's length 0: table[0] = 3.
        assert_eq!(t.eval(&[0, 5], 2, &[table]).0.offset, 64 + 2 * 3);
    }
}
