//! The kernel language: a kernel is a plain Rust function `fn(&mut Tl, &A)`.
//! At launch it is traced once per PE into an op program; control flow may
//! depend on program ids and arguments, never on data. Values are tiles of
//! f16 held in registers; the tracer allocates registers by liveness, so a
//! long unrolled loop needs only a handful.
//!
//! ```
//! use kernbench::kernel::{Addr, DType, Tl};
//! use kernbench_systems::program::QDir;
//!
//! /// Each PE adds what its west neighbour sends to its own vector.
//! fn shift_add(tl: &mut Tl, n: &usize) {
//!     let x = tl.load(Addr::tcm(0), *n);
//!     tl.send(QDir::E, x);
//!     let y = tl.recv(QDir::W, &[*n], DType::F16);
//!     let z = tl.add(x, y);
//!     tl.store(Addr::tcm(0), z);
//! }
//! ```

pub mod wiring;

use crate::topology::Topology;
use crate::topology::address::{AddressResolver, Space};
use kernbench_systems::program::{BinOp, MemLoc, Op, Program, QDir, Reg};
use std::sync::Arc;

/// Element types. The simulator models f16 data only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F16,
}

/// A traced value: a tile of `elems` f16 elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    value: u32,
    pub elems: usize,
}

/// An address a kernel loads from or stores to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// A global address (see `topology::address`).
    Global(u64),
    /// An offset in the executing PE's own TCM, or its cube's SRAM or HBM.
    Local(Space, u64),
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
}

/// The tracer a kernel writes against.
pub struct Tl<'a> {
    ids: [u32; 3],
    used_ids: bool,
    ops: Vec<Op>,
    /// Per value: element count; values are numbered in definition order.
    values: Vec<usize>,
    /// Per op: the values it reads and the value it defines.
    uses: Vec<([u32; 2], usize, Option<u32>)>,
    resolver: &'a AddressResolver,
    topo: &'a Topology,
    error: Option<String>,
}

impl<'a> Tl<'a> {
    fn new(ids: [u32; 3], resolver: &'a AddressResolver, topo: &'a Topology) -> Self {
        Self {
            ids,
            used_ids: false,
            ops: Vec::new(),
            values: Vec::new(),
            uses: Vec::new(),
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

    fn fail(&mut self, e: String) {
        self.error.get_or_insert(e);
    }

    fn def(&mut self, elems: usize) -> Tile {
        self.values.push(elems);
        Tile {
            value: self.values.len() as u32 - 1,
            elems,
        }
    }

    fn push(&mut self, op: Op, reads: &[Tile], out: Option<Tile>) {
        let mut r = [0; 2];
        for (i, t) in reads.iter().enumerate() {
            r[i] = t.value;
        }
        self.uses.push((r, reads.len(), out.map(|t| t.value)));
        self.ops.push(op);
    }

    fn loc(&mut self, a: Addr) -> MemLoc {
        match a {
            Addr::Local(space, offset) => MemLoc {
                space,
                instance: MemLoc::LOCAL,
                offset,
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

    /// `elems` f16 values from memory.
    pub fn load(&mut self, at: impl Into<Addr>, elems: usize) -> Tile {
        let src = self.loc(at.into());
        let t = self.def(elems);
        self.push(
            Op::Load {
                dst: 0,
                src,
                elems: elems as u64,
            },
            &[],
            Some(t),
        );
        t
    }

    /// Writes a tile to memory.
    pub fn store(&mut self, at: impl Into<Addr>, t: Tile) {
        let dst = self.loc(at.into());
        self.push(Op::Store { src: 0, dst }, &[t], None);
    }

    /// Sends a tile through the IPCQ of direction `dir`.
    pub fn send(&mut self, dir: QDir, t: Tile) {
        self.push(Op::Send { dir, src: 0 }, &[t], None);
    }

    /// Receives a tile of `shape` from the IPCQ of direction `dir`.
    pub fn recv(&mut self, dir: QDir, shape: &[usize], dtype: DType) -> Tile {
        let DType::F16 = dtype;
        let elems = shape.iter().product();
        let t = self.def(elems);
        self.push(
            Op::Recv {
                dir,
                dst: 0,
                elems: elems as u64,
            },
            &[],
            Some(t),
        );
        t
    }

    fn binary(&mut self, op: BinOp, a: Tile, b: Tile) -> Tile {
        if a.elems != b.elems {
            self.fail(format!(
                "{}: operands have {} and {} elements",
                op.name(),
                a.elems,
                b.elems
            ));
        }
        let t = self.def(a.elems);
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

    /// `a · factor` (factor rounded to f16).
    pub fn scale(&mut self, a: Tile, factor: f32) -> Tile {
        let t = self.def(a.elems);
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

    pub fn copy(&mut self, a: Tile) -> Tile {
        let t = self.def(a.elems);
        self.push(Op::Copy { dst: 0, src: 0 }, &[a], Some(t));
        t
    }

    /// `a[m×k] · b[k×n]`, row-major, accumulated in f32.
    pub fn gemm(&mut self, a: Tile, b: Tile, m: usize, n: usize, k: usize) -> Tile {
        let dim = |d: usize| u32::try_from(d).ok();
        let (Some(m32), Some(n32), Some(k32)) = (dim(m), dim(n), dim(k)) else {
            self.fail(format!(
                "gemm {m}x{k} · {k}x{n}: a dimension exceeds {} (u32)",
                u32::MAX
            ));
            return self.def(0);
        };
        if Some(a.elems) != m.checked_mul(k) || Some(b.elems) != k.checked_mul(n) {
            self.fail(format!(
                "gemm {m}x{k} · {k}x{n}: operands have {} and {} elements",
                a.elems, b.elems
            ));
        }
        let t = self.def(m.saturating_mul(n));
        self.push(
            Op::Gemm {
                dst: 0,
                a: 0,
                b: 0,
                m: m32,
                n: n32,
                k: k32,
            },
            &[a, b],
            Some(t),
        );
        t
    }

    /// Assigns registers by liveness: a value's register is free after its
    /// last read; an op may write a register one of its inputs frees.
    fn finish(mut self) -> Result<(Program, bool), String> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut last_use = vec![usize::MAX; self.values.len()];
        for (i, (r, n, _)) in self.uses.iter().enumerate() {
            for &v in &r[..*n] {
                last_use[v as usize] = i;
            }
        }
        let mut reg_of = vec![0 as Reg; self.values.len()];
        let (mut free, mut regs): (Vec<Reg>, u16) = (Vec::new(), 0);
        for (i, (r, n, out)) in self.uses.iter().enumerate() {
            let ins: Vec<Reg> = r[..*n].iter().map(|&v| reg_of[v as usize]).collect();
            for (k, &v) in r[..*n].iter().enumerate() {
                if last_use[v as usize] == i && !r[..k].contains(&v) {
                    free.push(ins[k]);
                }
            }
            let dst = out.map(|v| {
                let reg = free.pop().unwrap_or_else(|| {
                    regs += 1;
                    regs - 1
                });
                reg_of[v as usize] = reg;
                // A value nobody reads frees its register at once (its writer
                // still settles before the register is reused).
                if last_use[v as usize] == usize::MAX {
                    free.push(reg);
                }
                reg
            });
            let op = &mut self.ops[i];
            match op {
                Op::Load { dst: d, .. } | Op::Recv { dst: d, .. } => {
                    *d = dst.expect("defines a value")
                }
                Op::Store { src, .. } | Op::Send { src, .. } => *src = ins[0],
                Op::Scale { dst: d, src, .. } | Op::Copy { dst: d, src } => {
                    *d = dst.expect("defines a value");
                    *src = ins[0];
                }
                Op::Binary { dst: d, a, b, .. } | Op::Gemm { dst: d, a, b, .. } => {
                    *d = dst.expect("defines a value");
                    (*a, *b) = (ins[0], ins[1]);
                }
            }
        }
        Ok((
            Program {
                ops: self.ops,
                regs,
            },
            self.used_ids,
        ))
    }
}

/// A kernel function.
pub type Kernel<A> = fn(&mut Tl, &A);

/// Traces `kernel` for each PE (global index, coordinates). A kernel that
/// never reads its program id traces to the same program everywhere, so it is
/// traced once and shared.
pub fn trace<A>(
    kernel: Kernel<A>,
    args: &A,
    pes: &[(u32, [u32; 3])],
    resolver: &AddressResolver,
    topo: &Topology,
) -> Result<Vec<(u32, Arc<Program>)>, String> {
    let mut out = Vec::with_capacity(pes.len());
    let mut shared: Option<Arc<Program>> = None;
    for &(pe, ids) in pes {
        if let Some(p) = &shared {
            out.push((pe, p.clone()));
            continue;
        }
        let mut tl = Tl::new(ids, resolver, topo);
        kernel(&mut tl, args);
        let (program, used_ids) = tl
            .finish()
            .map_err(|e| format!("sip{}.cube{}.pe{}: {e}", ids[0], ids[1], ids[2]))?;
        let program = Arc::new(program);
        if !used_ids {
            shared = Some(program.clone());
        }
        out.push((pe, program));
    }
    Ok(out)
}
