//! The kernel language: a kernel is a plain Rust function `fn(&mut Tl, &A)`.
//! At launch it is traced for each PE into an op program; control flow may
//! depend on program ids and arguments, never on data. Values are tiles of
//! one dtype each (f16 unless loaded, received or cast otherwise) held in
//! registers, allocated by liveness.
//!
//! Programs are compact and shared. What differs between PEs of the same
//! role — a ring position, the block a step works on — enters as a
//! parameter ([`Tl::param`], a [`Sym`]) rather than a constant, and a step
//! repeated many times is a loop ([`Tl::repeat`]) traced once. PEs whose
//! traces come out the same share one program and differ only in their
//! parameter values, so a ring collective's program has the same length on
//! 16 participants as on 4,096.
//!
//! ```
//! use kernbench_runtime::kernel::{Addr, DType, Tl};
//! use kernbench_systems::program::QDir;
//!
//! /// Each PE adds what its west neighbour sends to its own vector, `rounds` times.
//! fn shift_add(tl: &mut Tl, &(n, rounds): &(usize, usize)) {
//!     let x = tl.load(Addr::tcm(0), n);
//!     let acc = tl.repeat(rounds, &[x], |tl, _round, acc| {
//!         tl.send(QDir::E, acc[0]);
//!         let y = tl.recv(QDir::W, &[n], DType::F16);
//!         vec![tl.add(acc[0], y)]
//!     });
//!     tl.store(Addr::tcm(0), acc[0]);
//! }
//! ```

mod regalloc;
mod share;
mod sym;
pub mod wiring;

pub(crate) use share::hash_op;
pub use sym::{Index, Sym};

use kernbench_spec::topology::Topology;
use kernbench_spec::topology::address::{AddressResolver, Space};
use kernbench_systems::PeIdx;
use kernbench_systems::program::{
    AtomExpr, BinOp, Digit, Launch, MemLoc, MemRect, Op, Place, Program, QDir, Reduce, UnOp,
};
use regalloc::{LoopRec, Uses};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

pub use kernbench_systems::dtype::DType;

/// A traced value: a tile of elements of one dtype (the count is known at
/// trace time unless it depends on a loop's iteration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    value: u32,
    pub elems: Option<usize>,
    pub dtype: DType,
}

/// An address a kernel loads from or stores to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// A global address (see `topology::address`).
    Global(u64),
    /// An offset in the executing PE's own TCM, or its cube's SRAM or HBM.
    Local(Space, u64),
    /// A memory named by its structural coordinates (a tensor shard's home).
    At(kernbench_spec::topology::address::Location),
}

impl Addr {
    pub fn tcm(offset: u64) -> Addr {
        Addr::Local(Space::Tcm, offset)
    }
    pub fn sram(offset: u64) -> Addr {
        Addr::Local(Space::Sram, offset)
    }
    pub fn hbm(offset: u64) -> Addr {
        Addr::Local(Space::Hbm, offset)
    }
    /// The address `bytes` further on in the same memory.
    pub fn plus(self, bytes: u64) -> Addr {
        match self {
            Addr::Local(space, off) => Addr::Local(space, off + bytes),
            Addr::Global(g) => Addr::Global(g + bytes),
            Addr::At(l) => Addr::At(kernbench_spec::topology::address::Location {
                offset: l.offset + bytes,
                ..l
            }),
        }
    }
}

/// A part of a buffer split level by level (the first `len % radix` blocks
/// of a level one element longer): the buffer's local base address and
/// length, and one [`Index`] per level, outermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub base: Addr,
    pub elems: usize,
    pub digits: Vec<(Index, usize)>,
}

/// What the PEs of one launch share while they are traced: named tables.
#[derive(Default)]
pub struct TraceCache {
    tables: RefCell<HashMap<String, Arc<[u32]>>>,
}

/// The tracer a kernel writes against.
pub struct Tl<'a> {
    ids: [u32; 3],
    used_ids: bool,
    ops: Vec<Op>,
    /// Per value: element count when known; values are numbered in definition order.
    values: Vec<Option<usize>>,
    /// Per op: the values it reads and the value it defines.
    uses: Vec<Uses>,
    params: Vec<i64>,
    atoms: Vec<AtomExpr>,
    rects: Vec<MemRect>,
    atom_ids: FxHashMap<AtomExpr, u32>,
    tables: Vec<Arc<[u32]>>,
    loops: Vec<LoopRec>,
    /// Values pinned to a loop's rotating registers.
    pinned: Vec<bool>,
    in_loop: bool,
    cache: &'a TraceCache,
    resolver: &'a AddressResolver,
    topo: &'a Topology,
    error: Option<String>,
}

impl<'a> Tl<'a> {
    fn new(
        ids: [u32; 3],
        cache: &'a TraceCache,
        resolver: &'a AddressResolver,
        topo: &'a Topology,
    ) -> Self {
        Self {
            ids,
            used_ids: false,
            ops: Vec::new(),
            values: Vec::new(),
            uses: Vec::new(),
            params: Vec::new(),
            atoms: Vec::new(),
            rects: Vec::new(),
            atom_ids: FxHashMap::default(),
            tables: Vec::new(),
            loops: Vec::new(),
            pinned: Vec::new(),
            in_loop: false,
            cache,
            resolver,
            topo,
            error: None,
        }
    }

    /// This PE's coordinates: axis 0 = SIP (the rank), 1 = cube, 2 = PE in its cube.
    pub fn program_id(&mut self, axis: usize) -> u32 {
        self.used_ids = true;
        match self.ids.get(axis) {
            Some(&id) => id,
            None => {
                self.fail(format!(
                    "program_id({axis}): axis must be 0 (sip), 1 (cube) or 2 (pe)"
                ));
                0
            }
        }
    }

    /// A per-PE parameter whose value on this PE is `value`. Addresses built
    /// from it are evaluated on each PE as the op issues, so PEs that differ
    /// only in their parameters share one program.
    pub fn param(&mut self, value: i64) -> Sym {
        if self.params.len() > u8::MAX as usize {
            self.fail(format!("more than {} parameters", u8::MAX as usize + 1));
        }
        self.params.push(value);
        Sym::param((self.params.len() - 1) as u8, value)
    }

    /// A table every PE of this launch shares, built once by the first PE that asks for it.
    pub fn table(&mut self, name: &str, build: impl FnOnce() -> Vec<u32>) -> Arc<[u32]> {
        let mut tables = self.cache.tables.borrow_mut();
        tables
            .entry(name.to_string())
            .or_insert_with(|| build().into())
            .clone()
    }

    fn fail(&mut self, e: String) {
        self.error.get_or_insert(e);
    }

    fn def(&mut self, elems: Option<usize>, dtype: DType) -> Tile {
        self.values.push(elems);
        self.pinned.push(false);
        Tile {
            value: self.values.len() as u32 - 1,
            elems,
            dtype,
        }
    }

    /// The dtype operands `a` and `b` of `what` share (a's, after failing
    /// the trace when they differ).
    fn same_dtype(&mut self, what: &str, a: Tile, b: Tile) -> DType {
        if a.dtype != b.dtype {
            self.fail(format!(
                "{what}: operands are {} and {}; allowed: operands of one dtype (convert one with tl.cast)",
                a.dtype, b.dtype
            ));
        }
        a.dtype
    }

    fn push(&mut self, op: Op, reads: &[Tile], out: Option<Tile>) {
        let mut r = [0; 2];
        for (i, t) in reads.iter().enumerate() {
            r[i] = t.value;
        }
        self.uses.push(Uses {
            reads: r,
            n: reads.len(),
            out: out.map(|t| t.value),
        });
        self.ops.push(op);
    }

    fn loc(&mut self, a: Addr) -> MemLoc {
        match a {
            Addr::Local(space, offset) => MemLoc {
                space,
                instance: MemLoc::LOCAL,
                offset,
            },
            Addr::At(l) => match self.resolver.encode(l) {
                Ok(_) => self.resolver.mem_loc(self.topo, l),
                Err(e) => {
                    self.fail(format!("location {l:?}: {e}"));
                    MemLoc {
                        space: Space::Tcm,
                        instance: MemLoc::LOCAL,
                        offset: 0,
                    }
                }
            },
            Addr::Global(g) => match self.resolver.decode(g) {
                Ok(l) => self.resolver.mem_loc(self.topo, l),
                Err(e) => {
                    self.fail(format!("address {g:#x}: {e}"));
                    MemLoc {
                        space: Space::Tcm,
                        instance: MemLoc::LOCAL,
                        offset: 0,
                    }
                }
            },
        }
    }

    /// The place of a buffer part, and its length when known on this PE.
    fn part(&mut self, p: &Part) -> (Place, Option<usize>) {
        let base = self.loc(p.base);
        let mut digits = Vec::with_capacity(p.digits.len());
        for (index, radix) in &p.digits {
            let (sym, table) = match index {
                Index::At(s) => (*s, None),
                Index::Table(t, s) => (*s, Some(t)),
            };
            let Some(form) = sym.form() else {
                self.fail("a buffer index combines two different parameters".into());
                return (
                    Place::Fixed {
                        loc: base,
                        elems: 0,
                    },
                    None,
                );
            };
            let digit = match table {
                None => Digit::Affine(form),
                Some(t) => {
                    let id = match self.tables.iter().position(|x| Arc::ptr_eq(x, t)) {
                        Some(id) => id,
                        None => {
                            self.tables.push(t.clone());
                            self.tables.len() - 1
                        }
                    };
                    Digit::Table {
                        table: id as u16,
                        index: form,
                    }
                }
            };
            digits.push((digit, u32::try_from(*radix).unwrap_or(u32::MAX)));
        }
        let expr = AtomExpr {
            base,
            elems: p.elems as u64,
            digits,
        };
        let known = p.digits.iter().all(|(i, r)| i.value(*r).is_some());
        let elems = known.then(|| expr.eval(&self.params, 0, &self.tables).1 as usize);
        // The same on every PE and iteration: resolved now, not as ops issue.
        let constant = expr.digits.iter().all(|(d, _)| match d {
            Digit::Affine(a) => a.coeff == 0 && a.step == 0,
            Digit::Table { index, .. } => index.coeff == 0 && index.step == 0,
        });
        if constant {
            let (loc, n) = expr.eval(&[], 0, &self.tables);
            return (Place::Fixed { loc, elems: n }, elems);
        }
        let id = match self.atom_ids.get(&expr) {
            Some(&id) => id,
            None => {
                let id = self.atoms.len() as u32;
                self.atom_ids.insert(expr.clone(), id);
                self.atoms.push(expr);
                id
            }
        };
        (Place::Atom(id), elems)
    }

    /// `elems` f16 values from memory.
    pub fn load(&mut self, at: impl Into<Addr>, elems: usize) -> Tile {
        self.load_as(at, elems, DType::F16)
    }

    /// `elems` values of `dtype` from memory.
    pub fn load_as(&mut self, at: impl Into<Addr>, elems: usize, dtype: DType) -> Tile {
        let loc = self.loc(at.into());
        let src = Place::Fixed {
            loc,
            elems: elems as u64,
        };
        let t = self.def(Some(elems), dtype);
        self.push(Op::Load { dst: 0, src, dtype }, &[], Some(t));
        t
    }

    /// A `rows`×`cols` f16 tile of a row-major matrix whose rows are `pitch`
    /// elements apart, from memory in one transfer (a 2-D DMA descriptor).
    /// Rows may overlap: pitch 0 reads one row `rows` times (a broadcast).
    pub fn load_rect(
        &mut self,
        at: impl Into<Addr>,
        rows: usize,
        cols: usize,
        pitch: usize,
    ) -> Tile {
        self.load_rect_as(at, (rows, cols, pitch), DType::F16)
    }

    /// [`Tl::load_rect`] of a matrix of `dtype`: `rows`×`cols` elements,
    /// rows `pitch` elements apart.
    pub fn load_rect_as(
        &mut self,
        at: impl Into<Addr>,
        (rows, cols, pitch): (usize, usize, usize),
        dtype: DType,
    ) -> Tile {
        let Some(src) = self.rect(at.into(), rows, cols, pitch, false) else {
            return self.def(Some(0), dtype);
        };
        let t = self.def(Some(rows * cols), dtype);
        self.push(Op::Load { dst: 0, src, dtype }, &[], Some(t));
        t
    }

    /// [`Tl::load_rect_as`] with the descriptor's transpose flag: the
    /// `rows`×`cols` rectangle lands as its `cols`×`rows` transpose, at the
    /// cost of the same load (a GEMM operand read as Xᵀ).
    pub fn load_rect_t_as(
        &mut self,
        at: impl Into<Addr>,
        shape: (usize, usize, usize),
        dtype: DType,
    ) -> Tile {
        let before = self.rects.len();
        let t = self.load_rect_as(at, shape, dtype);
        if self.rects.len() > before
            && let Some(r) = self.rects.last_mut()
        {
            r.transposed = true;
        }
        t
    }

    /// Writes a `rows`×`cols` tile into a row-major matrix whose rows are
    /// `pitch` elements apart, in one transfer.
    pub fn store_rect(
        &mut self,
        at: impl Into<Addr>,
        t: Tile,
        rows: usize,
        cols: usize,
        pitch: usize,
    ) {
        if t.elems.is_some_and(|e| e != rows * cols) {
            self.fail(format!(
                "store_rect of a tile of {} elements into {rows}x{cols}",
                t.elems.unwrap_or(0)
            ));
        }
        if let Some(dst) = self.rect(at.into(), rows, cols, pitch, true) {
            self.push(Op::Store { src: 0, dst }, &[t], None);
        }
    }

    /// A 2-D place; a store's rows must not overlap (a load's may).
    fn rect(
        &mut self,
        at: Addr,
        rows: usize,
        cols: usize,
        pitch: usize,
        store: bool,
    ) -> Option<Place> {
        let dim = |d: usize| u32::try_from(d).ok();
        match (dim(rows), dim(cols), dim(pitch)) {
            (Some(rows), Some(cols), Some(pitch)) if !store || cols <= pitch || rows <= 1 => {
                let loc = self.loc(at);
                self.rects.push(MemRect {
                    loc,
                    rows,
                    cols,
                    pitch,
                    transposed: false,
                });
                Some(Place::Rect(self.rects.len() as u32 - 1))
            }
            _ => {
                self.fail(format!(
                    "rectangle of {rows}x{cols} elements with rows {pitch} apart: a store's rows must not overlap (cols <= pitch) and each number fit in u32"
                ));
                None
            }
        }
    }

    /// A part of a split f16 buffer from memory.
    pub fn load_part(&mut self, p: &Part) -> Tile {
        let (src, elems) = self.part(p);
        let dtype = DType::F16;
        let t = self.def(elems, dtype);
        self.push(Op::Load { dst: 0, src, dtype }, &[], Some(t));
        t
    }

    /// Writes a tile to memory.
    pub fn store(&mut self, at: impl Into<Addr>, t: Tile) {
        let loc = self.loc(at.into());
        let dst = Place::Fixed {
            loc,
            elems: t.elems.unwrap_or(0) as u64,
        };
        self.push(Op::Store { src: 0, dst }, &[t], None);
    }

    /// Writes a tile to a part of a split buffer.
    pub fn store_part(&mut self, p: &Part, t: Tile) {
        let (dst, _) = self.part(p);
        self.push(Op::Store { src: 0, dst }, &[t], None);
    }

    /// Sends a tile through the IPCQ of direction `dir`.
    pub fn send(&mut self, dir: QDir, t: Tile) {
        self.push(Op::Send { dir, src: 0 }, &[t], None);
    }

    /// Receives a tile of `shape` from the IPCQ of direction `dir`.
    pub fn recv(&mut self, dir: QDir, shape: &[usize], dtype: DType) -> Tile {
        let elems: usize = shape.iter().product();
        let size = Place::Fixed {
            loc: MemLoc {
                space: Space::Tcm,
                instance: MemLoc::LOCAL,
                offset: 0,
            },
            elems: elems as u64,
        };
        self.push_recv(dir, (size, Some(elems)), dtype)
    }

    /// Receives an f16 tile the size of part `p` from the IPCQ of direction `dir`.
    pub fn recv_part(&mut self, dir: QDir, p: &Part) -> Tile {
        let (size, elems) = self.part(p);
        self.push_recv(dir, (size, elems), DType::F16)
    }

    /// A recv of `elems` elements of `dtype` covering `size`.
    fn push_recv(
        &mut self,
        dir: QDir,
        (size, elems): (Place, Option<usize>),
        dtype: DType,
    ) -> Tile {
        let t = self.def(elems, dtype);
        let op = Op::Recv {
            dir,
            dst: 0,
            size,
            dtype,
        };
        self.push(op, &[], Some(t));
        t
    }

    fn binary(&mut self, op: BinOp, a: Tile, b: Tile) -> Tile {
        if let (Some(x), Some(y)) = (a.elems, b.elems)
            && x != y
        {
            self.fail(format!("{}: operands have {x} and {y} elements", op.name()));
        }
        let dtype = self.same_dtype(op.name(), a, b);
        let t = self.def(a.elems.or(b.elems), dtype);
        self.push(
            Op::Binary {
                op,
                dst: 0,
                a: 0,
                b: 0,
            },
            &[a, b],
            Some(t),
        );
        t
    }

    pub fn add(&mut self, a: Tile, b: Tile) -> Tile {
        self.binary(BinOp::Add, a, b)
    }
    pub fn sub(&mut self, a: Tile, b: Tile) -> Tile {
        self.binary(BinOp::Sub, a, b)
    }
    pub fn mul(&mut self, a: Tile, b: Tile) -> Tile {
        self.binary(BinOp::Mul, a, b)
    }
    pub fn max(&mut self, a: Tile, b: Tile) -> Tile {
        self.binary(BinOp::Max, a, b)
    }
    pub fn min(&mut self, a: Tile, b: Tile) -> Tile {
        self.binary(BinOp::Min, a, b)
    }

    /// `a · factor` (factor rounded to a's dtype).
    pub fn scale(&mut self, a: Tile, factor: f32) -> Tile {
        let t = self.def(a.elems, a.dtype);
        self.push(
            Op::Scale {
                dst: 0,
                src: 0,
                factor,
            },
            &[a],
            Some(t),
        );
        t
    }

    fn unary(&mut self, op: UnOp, a: Tile, shift: f32) -> Tile {
        let t = self.def(a.elems, a.dtype);
        let op = Op::Unary {
            op,
            dst: 0,
            src: 0,
            shift,
        };
        self.push(op, &[a], Some(t));
        t
    }

    /// `e^a`, elementwise (computed in f32, rounded to a's dtype).
    pub fn exp(&mut self, a: Tile) -> Tile {
        self.unary(UnOp::Exp, a, 0.0)
    }
    /// GELU, tanh form, elementwise.
    pub fn gelu(&mut self, a: Tile) -> Tile {
        self.unary(UnOp::Gelu, a, 0.0)
    }
    /// `1 / √(a + eps)`, elementwise (`eps` added in f32).
    pub fn rsqrt(&mut self, a: Tile, eps: f32) -> Tile {
        self.unary(UnOp::Rsqrt, a, eps)
    }
    /// `1 / a`, elementwise.
    pub fn recip(&mut self, a: Tile) -> Tile {
        self.unary(UnOp::Recip, a, 0.0)
    }
    /// GELU's derivative (tanh form), elementwise.
    pub fn gelu_grad(&mut self, a: Tile) -> Tile {
        self.unary(UnOp::GeluGrad, a, 0.0)
    }

    /// The number of rows of `cols` in `a` (None when unknown or on a
    /// refusal, which fails the trace naming `what`).
    fn rows(&mut self, what: &str, a: Tile, cols: usize) -> Option<(usize, u32)> {
        let whole = |e: usize| cols > 0 && e.is_multiple_of(cols);
        match (u32::try_from(cols), a.elems) {
            (Ok(c), Some(e)) if whole(e) => Some((e / cols, c)),
            (Ok(c), None) if cols > 0 => Some((0, c)),
            _ => {
                self.fail(format!(
                    "{what}: a tile of {} elements is not whole rows of {cols}; allowed: rows x cols elements, 0 < cols <= {}",
                    a.elems.unwrap_or(0),
                    u32::MAX
                ));
                None
            }
        }
    }

    fn row_reduce(&mut self, op: Reduce, a: Tile, cols: usize) -> Tile {
        let Some((rows, cols)) = self.rows(op.name(), a, cols) else {
            return self.def(Some(0), a.dtype);
        };
        let t = self.def(a.elems.map(|_| rows), a.dtype);
        let op = Op::RowReduce {
            op,
            dst: 0,
            src: 0,
            cols,
        };
        self.push(op, &[a], Some(t));
        t
    }

    /// The largest element of each row of `cols` of `a`: one per row.
    pub fn row_max(&mut self, a: Tile, cols: usize) -> Tile {
        self.row_reduce(Reduce::Max, a, cols)
    }
    /// The sum of each row of `cols` of `a` (accumulated in f32): one per row.
    pub fn row_sum(&mut self, a: Tile, cols: usize) -> Tile {
        self.row_reduce(Reduce::Sum, a, cols)
    }

    fn row_broadcast(&mut self, op: BinOp, a: Tile, per_row: Tile, cols: usize) -> Tile {
        let Some((rows, cols)) = self.rows(op.row_name(), a, cols) else {
            return self.def(Some(0), a.dtype);
        };
        if let (Some(_), Some(n)) = (a.elems, per_row.elems)
            && n != rows
        {
            self.fail(format!(
                "{}: {rows} rows of {cols} take one scalar per row, and the scalars are {n}",
                op.row_name()
            ));
        }
        let dtype = self.same_dtype(op.row_name(), a, per_row);
        let t = self.def(a.elems, dtype);
        let op = Op::RowBroadcast {
            op,
            dst: 0,
            a: 0,
            b: 0,
            cols,
        };
        self.push(op, &[a, per_row], Some(t));
        t
    }

    /// `a[r, c] − per_row[r]` for rows of `cols`.
    pub fn row_sub(&mut self, a: Tile, per_row: Tile, cols: usize) -> Tile {
        self.row_broadcast(BinOp::Sub, a, per_row, cols)
    }
    /// `a[r, c] · per_row[r]` for rows of `cols`.
    pub fn row_mul(&mut self, a: Tile, per_row: Tile, cols: usize) -> Tile {
        self.row_broadcast(BinOp::Mul, a, per_row, cols)
    }

    pub fn copy(&mut self, a: Tile) -> Tile {
        let t = self.def(a.elems, a.dtype);
        self.push(Op::Copy { dst: 0, src: 0 }, &[a], Some(t));
        t
    }

    /// `a` rounded to `dtype` (one vector pass at the wider of the two dtypes).
    pub fn cast(&mut self, a: Tile, dtype: DType) -> Tile {
        let t = self.def(a.elems, dtype);
        let op = Op::Cast {
            dst: 0,
            src: 0,
            to: dtype,
        };
        self.push(op, &[a], Some(t));
        t
    }

    /// `a[m×k] · b[k×n]`, row-major, accumulated in f32 and rounded once to
    /// the operands' dtype.
    pub fn gemm(&mut self, a: Tile, b: Tile, m: usize, n: usize, k: usize) -> Tile {
        self.gemm_to(a, b, (m, n, k), a.dtype)
    }

    /// `a[m×k] · b[k×n]` accumulated in f32 and rounded once to `out`: f32
    /// keeps a K-loop's partial products unrounded until the last one.
    pub fn gemm_to(
        &mut self,
        a: Tile,
        b: Tile,
        (m, n, k): (usize, usize, usize),
        out: DType,
    ) -> Tile {
        let dim = |d: usize| u32::try_from(d).ok();
        let (Some(m32), Some(n32), Some(k32)) = (dim(m), dim(n), dim(k)) else {
            self.fail(format!(
                "gemm {m}x{k} · {k}x{n}: a dimension exceeds {} (u32)",
                u32::MAX
            ));
            return self.def(Some(0), out);
        };
        self.same_dtype("gemm", a, b);
        let fits = |t: Tile, want: Option<usize>| t.elems.is_none() || t.elems == want;
        if !fits(a, m.checked_mul(k)) || !fits(b, k.checked_mul(n)) {
            self.fail(format!(
                "gemm {m}x{k} · {k}x{n}: operands have {} and {} elements",
                a.elems.unwrap_or(0),
                b.elems.unwrap_or(0)
            ));
        }
        let t = self.def(Some(m.saturating_mul(n)), out);
        self.push(
            Op::Gemm {
                dst: 0,
                a: 0,
                b: 0,
                m: m32,
                n: n32,
                k: k32,
                out,
            },
            &[a, b],
            Some(t),
        );
        t
    }

    /// Runs `body` `count` times: iteration `i` gets `i` and the tiles the
    /// previous iteration returned (`carried` for the first) and returns the
    /// tiles for the next; `repeat` returns those of the last iteration.
    ///
    /// The body is traced once into a loop op when it can be: `count` ≥ 2,
    /// not inside another loop, and the carried tiles distinct and not
    /// themselves carried by an earlier loop. Inside, `i` is symbolic: the
    /// body may compute buffer indices from it but not branch on it. A
    /// carried tile may not be read after the loop starts, and a tile made in
    /// the body leaves it only as a carried result. Otherwise the body is
    /// traced once per iteration with `i` known, which runs the same ops.
    pub fn repeat(
        &mut self,
        count: usize,
        carried: &[Tile],
        mut body: impl FnMut(&mut Tl, Sym, &[Tile]) -> Vec<Tile>,
    ) -> Vec<Tile> {
        let mut seen = carried.iter().map(|t| t.value).collect::<Vec<_>>();
        seen.sort_unstable();
        seen.dedup();
        let compact = count >= 2
            && !self.in_loop
            && seen.len() == carried.len()
            && u32::try_from(count).is_ok()
            && carried.iter().all(|t| !self.pinned[t.value as usize]);
        if !compact {
            let mut c = carried.to_vec();
            for i in 0..count {
                c = body(self, Sym::from(i), &c);
            }
            return c;
        }
        let marker = self.ops.len();
        let loop_op = Op::Loop {
            count: count as u32,
            len: 0,
            rot: 0,
            rot_len: 0,
        };
        self.push(loop_op, &[], None);
        let phis: Vec<Tile> = carried.iter().map(|t| self.def(None, t.dtype)).collect();
        self.in_loop = true;
        let results = body(self, Sym::iteration(), &phis);
        self.in_loop = false;
        let end = self.ops.len();
        let first_body_value = phis.last().map_or(0, |t| t.value + 1);
        let mut distinct: Vec<u32> = results.iter().map(|t| t.value).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if results.len() != carried.len()
            || distinct.len() != results.len()
            || results.iter().any(|t| t.value < first_body_value)
            || results.iter().zip(carried).any(|(r, c)| r.dtype != c.dtype)
        {
            self.fail(format!(
                "loop at op {marker}: the body must return {} new, distinct tiles made in the body, each of its carried tile's dtype",
                carried.len()
            ));
            return carried.to_vec();
        }
        if end == marker + 1 {
            self.fail(format!("loop at op {marker}: the body issues no op"));
        }
        if let Op::Loop { len, .. } = &mut self.ops[marker] {
            *len = (end - marker - 1) as u32;
        }
        let posts: Vec<Tile> = results.iter().map(|t| self.def(None, t.dtype)).collect();
        let rec = LoopRec {
            marker,
            end,
            count,
            inits: carried.iter().map(|t| t.value).collect(),
            phis: phis.iter().map(|t| t.value).collect(),
            results: results.iter().map(|t| t.value).collect(),
            posts: posts.iter().map(|t| t.value).collect(),
        };
        for v in rec
            .inits
            .iter()
            .chain(&rec.phis)
            .chain(&rec.results)
            .chain(&rec.posts)
        {
            self.pinned[*v as usize] = true;
        }
        self.loops.push(rec);
        posts
    }

    /// The program, this PE's parameter values and whether it read its program id.
    fn finish(mut self) -> Result<(Program, Vec<i64>, bool), String> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let regs = regalloc::allocate(&mut self.ops, &self.uses, self.values.len(), &self.loops)?;
        Ok((
            Program {
                ops: self.ops,
                regs,
                atoms: self.atoms,
                rects: self.rects,
                tables: self.tables,
            },
            self.params,
            self.used_ids,
        ))
    }
}

/// A kernel function.
pub type Kernel<A> = fn(&mut Tl, &A);

/// Traces `kernel` for each PE (global index, coordinates). PEs whose
/// programs come out the same share one; a kernel that never reads its
/// program id is traced once.
pub fn trace<A>(
    kernel: Kernel<A>,
    args: &A,
    pes: &[(PeIdx, [u32; 3])],
    resolver: &AddressResolver,
    topo: &Topology,
) -> Result<Vec<(PeIdx, Launch)>, String> {
    let cache = TraceCache::default();
    let mut programs = share::Programs::default();
    let mut out = Vec::with_capacity(pes.len());
    let mut same_everywhere: Option<Launch> = None;
    for &(pe, ids) in pes {
        if let Some(l) = &same_everywhere {
            out.push((pe, l.clone()));
            continue;
        }
        let mut tl = Tl::new(ids, &cache, resolver, topo);
        kernel(&mut tl, args);
        let (program, params, used_ids) = tl
            .finish()
            .map_err(|e| format!("sip{}.cube{}.pe{}: {e}", ids[0], ids[1], ids[2]))?;
        let launch = Launch {
            program: programs.intern(program),
            params: params.into(),
        };
        if !used_ids {
            same_everywhere = Some(launch.clone());
        }
        out.push((pe, launch));
    }
    Ok(out)
}
