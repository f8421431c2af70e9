//! Issuing one op: its operands, its unit or port, its cost and its effect.

use super::*;
use crate::dtype::DType;
use crate::ipcq::{NeighborTable, QueueAccess, QueueId, RecvJob, SendJob, pump_recv, pump_send};
use crate::memory::MemoryStore;
use crate::network::{NewMessage, Purpose};
use crate::program::{BinOp, Op, Place, Reduce, Reg, Space};
use crate::time::Tick;
use bevy_ecs::prelude::*;
use std::sync::Arc;

/// `a ∘ b` elementwise, in f32, each result rounded to `dtype`.
fn elementwise(op: BinOp, a: &[f32], b: &[f32], dtype: DType) -> Vec<f32> {
    let f = |x: f32, y: f32| {
        dtype.round(match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Max => x.max(y),
            BinOp::Min => x.min(y),
        })
    };
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

/// `a[m×k] · b[k×n]`: products summed in f32, each sum rounded once to `out`.
fn gemm(a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), out: DType) -> Vec<f32> {
    let mut c = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let acc: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            c.push(out.round(acc));
        }
    }
    c
}

/// The dtype two operands share, or why `what` refuses them.
fn same_dtype(what: &str, a: DType, b: DType) -> Result<DType, String> {
    if a == b {
        return Ok(a);
    }
    Err(format!(
        "{what}: operands are {a} and {b}; allowed: operands of one dtype (convert one with tl.cast)"
    ))
}

/// Issues one op at `now`.
/// What issuing an op touches besides the queues.
pub(super) struct IssueCtx<'a> {
    pub(super) rate: crate::hierarchy::PeRate,
    pub(super) functional: bool,
    pub(super) store: &'a mut MemoryStore,
    pub(super) host: &'a mut HostQueue,
}

#[inline]
pub(super) fn issue(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    table: Option<&NeighborTable>,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    match *op {
        Op::Binary { .. } | Op::Scale { .. } | Op::Copy { .. } | Op::Cast { .. } => {
            compute(pe, ex, op, ka, qa)
        }
        Op::Gemm { .. } => matmul(pe, ex, op, ka, qa),
        Op::Unary { .. } | Op::RowReduce { .. } | Op::RowBroadcast { .. } => {
            row_or_unary(pe, ex, op, ka, qa)
        }
        Op::Load { .. } => load(pe, ex, op, ka, qa),
        Op::Store { .. } => store(pe, ex, op, ka, qa),
        Op::Send { .. } => send(pe, ex, op, table, ka, qa),
        Op::Recv { .. } => recv(pe, ex, op, table, qa),
        Op::Loop { .. } => unreachable!("PeExec moves past loop markers"),
        Op::Busy { ticks } => {
            busy(pe, ex, ticks, qa);
            Ok(())
        }
    }
}

/// The PE is occupied until `ticks` from now: its finish moves there.
fn busy(pe: PeIdx, ex: &mut PeExec, ticks: u64, qa: &mut QueueAccess) {
    let now = qa.clock.now;
    let done = now + ticks;
    qa.trace
        .op(&*qa.hw, pe, "busy", now, done, 0, None, String::new);
    ex.finish = ex.finish.max(done);
}

/// A vector op of one pass: it waits for the vector unit (FIFO) and writes
/// its register when done.
fn compute(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    let functional = ka.functional;
    // (dst, elems, input dtype, dtype of the result, dtype the pass runs at, values)
    let (dst, elems, input, dtype, pass, data) = match *op {
        Op::Binary { op: bop, dst, a, b } => {
            let (ra, rb) = (&ex.regs[a as usize], &ex.regs[b as usize]);
            if ra.elems != rb.elems {
                return Err(format!(
                    "operands have {} and {} elements",
                    ra.elems, rb.elems
                ));
            }
            let dtype = same_dtype(bop.name(), ra.dtype, rb.dtype)?;
            let data =
                functional.then(|| Arc::new(elementwise(bop, values(ra), values(rb), dtype)));
            (dst, ra.elems, dtype, dtype, dtype, data)
        }
        Op::Scale { dst, src, factor } => {
            let r = &ex.regs[src as usize];
            let (dtype, f) = (r.dtype, r.dtype.round(factor));
            let data = functional
                .then(|| Arc::new(values(r).iter().map(|&x| dtype.round(x * f)).collect()));
            (dst, r.elems, dtype, dtype, dtype, data)
        }
        Op::Copy { dst, src } => {
            let r = &ex.regs[src as usize];
            let data = r.data.clone();
            (dst, r.elems, r.dtype, r.dtype, r.dtype, data)
        }
        Op::Cast { dst, src, to } => {
            let r = &ex.regs[src as usize];
            let wider = if to.bytes() > r.dtype.bytes() {
                to
            } else {
                r.dtype
            };
            let data =
                functional.then(|| Arc::new(values(r).iter().map(|&x| to.round(x)).collect()));
            (dst, r.elems, r.dtype, to, wider, data)
        }
        _ => unreachable!("issue() sends only one-pass vector ops here"),
    };
    let done = vector(ex, now, elems, pass.lanes(ka.rate.vector_lanes));
    let bytes = elems * pass.bytes();
    qa.trace.op(
        &*qa.hw,
        pe,
        op.name(),
        now,
        done,
        bytes,
        None,
        || match *op {
            Op::Scale { factor, .. } => format!("elems={elems} factor={factor}"),
            Op::Cast { to, .. } => format!("elems={elems} {input}->{to}"),
            _ => format!("elems={elems}"),
        },
    );
    set(ex, dst, done, (elems, dtype), data);
    Ok(())
}

/// A GEMM on the MAC array: it waits for the array (FIFO) and writes its
/// register, of the op's output dtype, when done.
fn matmul(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let Op::Gemm {
        dst,
        a,
        b,
        m,
        n,
        k,
        out,
    } = *op
    else {
        unreachable!("issue() sends only gemm here")
    };
    let now = qa.clock.now;
    let (ra, rb) = (&ex.regs[a as usize], &ex.regs[b as usize]);
    let (m, n, k) = (u64::from(m), u64::from(n), u64::from(k));
    if ra.elems != m * k || rb.elems != k * n {
        return Err(format!(
            "gemm {m}x{k} · {k}x{n} got operands of {} and {} elements",
            ra.elems, rb.elems
        ));
    }
    let input = same_dtype("gemm", ra.dtype, rb.dtype)?;
    let data = ka.functional.then(|| {
        let dims = (m as usize, n as usize, k as usize);
        gemm(values(ra), values(rb), dims, out)
    });
    let macs = m * n * k * input.mac_passes();
    let start = now.max(ex.mac_free);
    let done = start + macs.div_ceil(ka.rate.macs_per_tick);
    ex.mac_free = done;
    let bytes = (m * k + k * n) * input.bytes() + m * n * out.bytes();
    qa.trace
        .op(&*qa.hw, pe, "gemm", now, done, bytes, None, || {
            format!("m={m} n={n} k={k}")
        });
    set(ex, dst, done, (m * n, out), data);
    Ok(())
}

/// The rows of `cols` elements a register of `elems` holds, or why it does not hold whole rows.
fn rows_of(name: &str, elems: u64, cols: u32) -> Result<u64, String> {
    let cols = u64::from(cols);
    if cols == 0 || !elems.is_multiple_of(cols) {
        return Err(format!(
            "{name}: a register of {elems} elements is not whole rows of {cols}; allowed: a register of rows x cols elements, cols > 0"
        ));
    }
    Ok(elems / cols)
}

/// Ticks of a row reduction of `rows` rows of `cols` on `lanes` lanes: per
/// row, one pass per `lanes` elements folds it into `min(cols, lanes)`
/// partials, then a tree of `⌈log2 min(cols, lanes)⌉` levels, a tick each.
pub fn row_reduce_ticks(rows: u64, cols: u64, lanes: u64) -> u64 {
    let partials = cols.min(lanes).max(1);
    rows * (cols.div_ceil(lanes) + u64::from(partials.next_power_of_two().trailing_zeros()))
}

/// A register's values (none in timing-only runs).
fn values(r: &RegState) -> &[f32] {
    r.data.as_deref().map_or(&[], Vec::as_slice)
}

/// One row of `a` combined with its row's scalar of `b`, for every row.
fn broadcast(op: BinOp, a: &[f32], b: &[f32], cols: usize, dtype: DType) -> Vec<f32> {
    a.chunks(cols)
        .zip(b)
        .flat_map(|(row, &s)| elementwise(op, row, &vec![s; row.len()], dtype))
        .collect()
}

/// Each row of `cols` reduced to one element (a sum accumulated in f32),
/// rounded to `dtype`.
fn reduce(op: Reduce, a: &[f32], cols: usize, dtype: DType) -> Vec<f32> {
    let fold = |row: &[f32]| match op {
        Reduce::Max => row.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        Reduce::Sum => row.iter().sum(),
    };
    a.chunks(cols).map(|row| dtype.round(fold(row))).collect()
}

/// What a vector op computes: its output register, the elements it reads
/// and writes, its ticks on the vector unit and (functional mode) its values.
struct VectorResult {
    dst: Reg,
    in_elems: u64,
    out_elems: u64,
    dtype: DType,
    ticks: u64,
    data: Option<Vec<f32>>,
}

/// An elementwise function, a row reduction or a row broadcast, evaluated:
/// values from f32 rounded to the operand's dtype, ticks as docs/model.md
/// §Kernels states (`lanes` 16-bit lanes; an f32 element takes two).
fn evaluate(op: &Op, ex: &PeExec, functional: bool, lanes: u64) -> Result<VectorResult, String> {
    let reg = |r: Reg| &ex.regs[r as usize];
    let elems = |r: Reg| reg(r).elems;
    Ok(match *op {
        Op::Unary {
            op: uop,
            dst,
            src,
            shift,
        } => {
            let (e, dtype) = (elems(src), reg(src).dtype);
            let f = |&x: &f32| dtype.round(uop.apply(x + shift));
            VectorResult {
                dst,
                in_elems: e,
                out_elems: e,
                dtype,
                ticks: uop.passes() * e.div_ceil(dtype.lanes(lanes)),
                data: functional.then(|| values(reg(src)).iter().map(f).collect()),
            }
        }
        Op::RowReduce {
            op: rop,
            dst,
            src,
            cols,
        } => {
            let rows = rows_of(rop.name(), elems(src), cols)?;
            let dtype = reg(src).dtype;
            VectorResult {
                dst,
                in_elems: elems(src),
                out_elems: rows,
                dtype,
                ticks: row_reduce_ticks(rows, cols.into(), dtype.lanes(lanes)),
                data: functional.then(|| reduce(rop, values(reg(src)), cols as usize, dtype)),
            }
        }
        Op::RowBroadcast {
            op: bop,
            dst,
            a,
            b,
            cols,
        } => {
            let rows = rows_of(bop.row_name(), elems(a), cols)?;
            if elems(b) != rows {
                return Err(format!(
                    "{}: {rows} rows of {cols} take one scalar per row, and the scalars are {}",
                    bop.row_name(),
                    elems(b)
                ));
            }
            let dtype = same_dtype(bop.row_name(), reg(a).dtype, reg(b).dtype)?;
            let (va, vb) = (values(reg(a)), values(reg(b)));
            VectorResult {
                dst,
                in_elems: elems(a),
                out_elems: elems(a),
                dtype,
                ticks: elems(a).div_ceil(dtype.lanes(lanes)),
                data: functional.then(|| broadcast(bop, va, vb, cols as usize, dtype)),
            }
        }
        _ => unreachable!("issue() sends only unary and row ops here"),
    })
}

/// An elementwise function, a row reduction or a row broadcast: it waits
/// for the vector unit (FIFO) and writes its register when done.
fn row_or_unary(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    let r = evaluate(op, ex, ka.functional, ka.rate.vector_lanes)?;
    let done = vector_for(ex, now, r.ticks);
    let elems = r.in_elems;
    qa.trace.op(
        &*qa.hw,
        pe,
        op.name(),
        now,
        done,
        elems * r.dtype.bytes(),
        None,
        || format!("elems={elems}"),
    );
    set(ex, r.dst, done, (r.out_elems, r.dtype), r.data);
    Ok(())
}

/// A load: from the PE's own TCM through its port, else from a remote memory as a message (the register is pending until the data lands).
fn load(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    let functional = ka.functional;
    let hw = &*qa.hw;
    let Some((src, rows, cols, pitch, dtype)) = (match *op {
        Op::Load { src, dtype, .. } => ex.program.rect(src).map(|(s, r, c, p)| (s, r, c, p, dtype)),
        _ => None,
    }) else {
        unreachable!("issue() dispatches by op kind; PeExec::op resolves places")
    };
    let dst = op.output().expect("a load writes a register");
    let src = src.resolve(pe, hw.pes_per_cube);
    let elems = rows * cols;
    let bytes = elems * dtype.bytes();
    let transposed = match *op {
        Op::Load { src, .. } => ex.program.transposed(src),
        _ => false,
    };
    let data = if functional {
        let d = ka.store.read_rect(src, (rows, cols, pitch), dtype)?;
        Some(if transposed {
            transpose(&d, rows as usize, cols as usize)
        } else {
            d
        })
    } else {
        None
    };
    let done = qa.ports.access(src.space, src.instance, now, bytes);
    let local = src.space == Space::Tcm && src.instance == pe.0;
    if local {
        qa.trace.op(hw, pe, "load", now, done, bytes, None, || {
            format!("{}{}+{:#x}", src.space.name(), src.instance, src.offset)
        });
        set(ex, dst, done, (elems, dtype), data);
    } else {
        let handle = qa.trace.op(hw, pe, "load", now, PENDING, bytes, None, || {
            format!("{}{}+{:#x}", src.space.name(), src.instance, src.offset)
        });
        set(ex, dst, PENDING, (elems, dtype), data);
        ex.pending_regs += 1;
        let tag = ka.host.loads.insert(LoadJob {
            pe,
            reg: dst,
            trace: handle,
        }) as u64;
        qa.outbox.send(NewMessage {
            src: hw.mem_node(src),
            dst: hw.pe_node(pe),
            bytes,
            at: done,
            purpose: Purpose::LoadData,
            tag,
            route: None,
        });
    }
    Ok(())
}

/// A row-major `rows`×`cols` tile as its `cols`×`rows` transpose.
fn transpose<T: Copy>(d: &[T], rows: usize, cols: usize) -> Vec<T> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| d[r * cols + c]))
        .collect()
}

/// A store: to the PE's own TCM through its port, else to a remote memory as a message (outstanding until it completes there).
fn store(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    let hw = &*qa.hw;
    let Op::Store { src, dst } = *op else {
        unreachable!("issue() dispatches by op kind")
    };
    let Some((dst, rows, cols, pitch)) = ex.program.rect(dst) else {
        unreachable!("PeExec::op resolves places")
    };
    let dst = dst.resolve(pe, hw.pes_per_cube);
    let r = &ex.regs[src as usize];
    let bytes = r.elems * r.dtype.bytes();
    if rows > 1 && r.elems != rows * cols {
        return Err(format!(
            "store of {} elements into a {rows}x{cols} rectangle",
            r.elems
        ));
    }
    if let Some(d) = &r.data {
        ka.store.write_rect(dst, r.dtype, d, (rows, pitch))?;
    }
    if dst.space == Space::Tcm && dst.instance == pe.0 {
        let done = qa.ports.access(dst.space, dst.instance, now, bytes);
        qa.trace.op(hw, pe, "store", now, done, bytes, None, || {
            format!("{}{}+{:#x}", dst.space.name(), dst.instance, dst.offset)
        });
        ex.finish = ex.finish.max(done);
    } else {
        let handle = qa.trace.op(hw, pe, "store", now, PENDING, bytes, None, || {
            format!("{}{}+{:#x}", dst.space.name(), dst.instance, dst.offset)
        });
        let tag = ka.host.stores.insert(StoreJob {
            pe,
            dst,
            bytes,
            trace: handle,
        }) as u64;
        ex.outstanding += 1;
        qa.outbox.send(NewMessage {
            src: hw.pe_node(pe),
            dst: hw.mem_node(dst),
            bytes,
            at: now,
            purpose: Purpose::StoreData,
            tag,
            route: None,
        });
    }
    Ok(())
}

/// A send: queued on the peer's IPCQ queue of this direction; chunks leave as credits allow.
fn send(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    table: Option<&NeighborTable>,
    ka: &mut IssueCtx,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    let functional = ka.functional;
    let hw = &*qa.hw;
    let Op::Send { dir, src } = *op else {
        unreachable!("issue() dispatches by op kind")
    };
    let (e, q) = table.and_then(|t| t.send(dir)).ok_or_else(|| {
        format!(
            "send on {}: this PE has no neighbour-table entry for {}",
            dir.name(),
            dir.name()
        )
    })?;
    let r = &ex.regs[src as usize];
    let (bytes, dtype) = (r.elems * r.dtype.bytes(), r.dtype);
    let slot = qa.queues.list[q.index()].slot_size;
    if bytes > 0 && slot < dtype.bytes() {
        return Err(format!(
            "send of {dtype} on {}: its slots of {slot} bytes hold no {dtype} element; allowed: slot_size of at least {} bytes",
            dir.name(),
            dtype.bytes()
        ));
    }
    let flow = flow_id(q, &mut qa.queues.list[q.index()].send_ops);
    let handle = qa.trace.op(hw, pe, "send", now, PENDING, bytes, flow, || {
        format!("dir={} peer={}", dir.name(), e.peer)
    });
    ex.outstanding += 1;
    let data = if functional { r.data.clone() } else { None };
    let (mut ctx, _) = qa.ctx();
    if bytes == 0 {
        ctx.trace.finish(handle, now);
        ctx.pe_events.push(PeEvent::Complete { pe, at: now });
    } else {
        ctx.queues.list[q.index()].sends.push_back(SendJob {
            pe,
            bytes,
            sent: 0,
            dtype,
            data,
            trace: handle,
        });
        pump_send(&mut ctx, q);
    }
    Ok(())
}

/// A recv: queued on this PE's queue of this direction; the register is pending until every chunk has landed.
fn recv(
    pe: PeIdx,
    ex: &mut PeExec,
    op: &Op,
    table: Option<&NeighborTable>,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    let hw = &*qa.hw;
    let Op::Recv {
        dir,
        dst,
        size: Place::Fixed { elems, .. },
        dtype,
    } = *op
    else {
        unreachable!("issue() dispatches by op kind; PeExec::op resolves places")
    };
    let q = table.and_then(|t| t.recv(dir)).ok_or_else(|| {
        format!(
            "recv on {}: this PE has no neighbour-table entry for {}",
            dir.name(),
            dir.name()
        )
    })?;
    let bytes = elems * dtype.bytes();
    let flow = flow_id(q, &mut qa.queues.list[q.index()].recv_ops);
    let handle = qa.trace.op(hw, pe, "recv", now, PENDING, bytes, flow, || {
        format!("dir={}", dir.name())
    });
    set(ex, dst, PENDING, (elems, dtype), None::<Vec<f32>>);
    ex.pending_regs += 1;
    let (mut ctx, _) = qa.ctx();
    ctx.queues.list[q.index()].recvs.push_back(RecvJob {
        pe,
        reg: dst,
        bytes,
        got: 0,
        landing: 0,
        ready: now,
        data: Vec::new(),
        trace: handle,
    });
    pump_recv(&mut ctx, q)?;
    Ok(())
}

/// The flow id of the next send or recv op on queue `q` (`ops` counts them).
fn flow_id(q: QueueId, ops: &mut u32) -> Option<u64> {
    let k = *ops;
    *ops = ops.wrapping_add(1);
    Some(u64::from(q.0) << 32 | u64::from(k))
}

/// Occupies the vector unit for `elems` elements; returns the completion tick.
/// One pass over `elems` on the vector unit: when it is done.
fn vector(ex: &mut PeExec, now: Tick, elems: u64, lanes: u64) -> Tick {
    vector_for(ex, now, elems.div_ceil(lanes))
}

/// `ticks` of work on the vector unit, after what it already holds (FIFO).
fn vector_for(ex: &mut PeExec, now: Tick, ticks: u64) -> Tick {
    let start = now.max(ex.vector_free);
    ex.vector_free = start + ticks;
    ex.vector_free
}

/// Register `reg` holds `elems` of `dtype` from `ready_at`, with `data`'s
/// values (fresh ones, or another register's shared).
fn set(
    ex: &mut PeExec,
    reg: Reg,
    ready_at: Tick,
    (elems, dtype): (u64, DType),
    data: Option<impl Into<Arc<Vec<f32>>>>,
) {
    if ready_at != PENDING {
        ex.finish = ex.finish.max(ready_at);
    }
    ex.regs[reg as usize] = RegState {
        ready_at,
        elems,
        dtype,
        data: data.map(Into::into),
    };
}
