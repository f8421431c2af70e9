//! One copy of each distinct program of a launch: PEs whose traces come out
//! the same share it (by `Arc`), and differ only in their parameter values.

use kernbench_systems::program::{Op, Program};
use rustc_hash::FxHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

#[derive(Default)]
pub(super) struct Programs {
    by_hash: HashMap<u64, Vec<Arc<Program>>>,
}

impl Programs {
    /// The shared copy of `p`.
    pub(super) fn intern(&mut self, p: Program) -> Arc<Program> {
        let bucket = self.by_hash.entry(fingerprint(&p)).or_default();
        if let Some(same) = bucket.iter().find(|q| same_program(q, &p)) {
            return same.clone();
        }
        let p = Arc::new(p);
        bucket.push(p.clone());
        p
    }
}

/// Tables are compared by identity: the tracer hands every PE of a launch the same `Arc`.
fn same_program(a: &Program, b: &Program) -> bool {
    a.regs == b.regs
        && a.ops == b.ops
        && a.atoms == b.atoms
        && a.rects == b.rects
        && a.tables.len() == b.tables.len()
        && a.tables
            .iter()
            .zip(&b.tables)
            .all(|(x, y)| Arc::ptr_eq(x, y))
}

fn fingerprint(p: &Program) -> u64 {
    let mut h = FxHasher::default();
    p.regs.hash(&mut h);
    p.ops.len().hash(&mut h);
    for op in &p.ops {
        hash_op(op, &mut h);
    }
    p.atoms.hash(&mut h);
    p.rects.hash(&mut h);
    for t in &p.tables {
        (Arc::as_ptr(t) as *const u32 as usize).hash(&mut h);
    }
    h.finish()
}

/// Feeds every field of `op` to `h` (floats by their bits).
pub(crate) fn hash_op(op: &Op, h: &mut impl Hasher) {
    std::mem::discriminant(op).hash(h);
    match *op {
        Op::Load { dst, src, dtype } => (dst, src, dtype).hash(h),
        Op::Store { src, dst } => (src, dst).hash(h),
        Op::Send { dir, src } => (dir, src).hash(h),
        Op::Recv {
            dir,
            dst,
            size,
            dtype,
        } => (dir, dst, size, dtype).hash(h),
        Op::Binary { op, dst, a, b } => (op, dst, a, b).hash(h),
        Op::Scale { dst, src, factor } => (dst, src, factor.to_bits()).hash(h),
        Op::Copy { dst, src } => (dst, src).hash(h),
        Op::Cast { dst, src, to } => (dst, src, to).hash(h),
        Op::Unary {
            op,
            dst,
            src,
            shift,
        } => (op, dst, src, shift.to_bits()).hash(h),
        Op::RowReduce { op, dst, src, cols } => (op, dst, src, cols).hash(h),
        Op::RowBroadcast {
            op,
            dst,
            a,
            b,
            cols,
        } => (op, dst, a, b, cols).hash(h),
        Op::Gemm {
            dst,
            a,
            b,
            m,
            n,
            k,
            out,
        } => (dst, a, b, m, n, k, out).hash(h),
        Op::Loop {
            count,
            len,
            rot,
            rot_len,
        } => (count, len, rot, rot_len).hash(h),
        Op::Busy { ticks } => ticks.hash(h),
    }
}
