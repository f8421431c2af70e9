//! Register allocation of a traced program, loops included.
//!
//! Values are numbered in definition order. A value's register is free after
//! its last read; an op may write a register one of its inputs frees. A loop
//! carries values from one iteration to the next in a rotating pair of
//! registers per value (see `Op::Loop`): the value entering the loop, the
//! body's view of it and the body's new value are *pinned* to that pair,
//! outside the free pool. Anything else live while a loop runs keeps its
//! register until the loop ends. Which register a value gets never changes
//! timing: a register is reused only after its value was read, so it has
//! settled.

use kernbench_systems::program::{Op, Reg};

/// What an op reads and defines, as value numbers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Uses {
    pub reads: [u32; 2],
    pub n: usize,
    pub out: Option<u32>,
}

/// A traced loop: marker op index, first op after the body, trip count, and
/// per carried value: the value entering (init), the body's parameter (phi),
/// the body's result and the value seen after the loop (post).
#[derive(Debug, Clone, Default)]
pub(super) struct LoopRec {
    pub marker: usize,
    pub end: usize,
    pub count: usize,
    pub inits: Vec<u32>,
    pub phis: Vec<u32>,
    pub results: Vec<u32>,
    pub posts: Vec<u32>,
}

const PINNED: u32 = 1 << 20;

/// Assigns registers, writes them into `ops` and patches the loop markers;
/// returns the register count.
pub(super) fn allocate(
    ops: &mut [Op],
    uses: &[Uses],
    values: usize,
    loops: &[LoopRec],
) -> Result<u16, String> {
    // Pinned slots: per loop, A (inits, phis, even posts) then B (results, odd posts).
    let mut reg_of = vec![u32::MAX; values];
    let mut slots = 0u32;
    let mut bases = Vec::with_capacity(loops.len());
    for l in loops {
        let k = l.inits.len() as u32;
        bases.push(slots);
        for j in 0..k as usize {
            let (a, b) = (PINNED + slots + j as u32, PINNED + slots + k + j as u32);
            reg_of[l.inits[j] as usize] = a;
            reg_of[l.phis[j] as usize] = a;
            reg_of[l.results[j] as usize] = b;
            reg_of[l.posts[j] as usize] = if l.count % 2 == 0 { a } else { b };
        }
        slots += 2 * k;
    }
    let is_pinned: Vec<bool> = reg_of.iter().map(|&r| r != u32::MAX).collect();
    let pinned = |v: u32| is_pinned[v as usize];

    // Where each value's register comes free: after its last read, or after
    // the loop if it is read inside a loop it was defined before.
    let mut def_at = vec![usize::MAX; values];
    let mut free_at = vec![usize::MAX; values];
    for (i, u) in uses.iter().enumerate() {
        for &v in &u.reads[..u.n] {
            free_at[v as usize] = i;
        }
        if let Some(v) = u.out {
            def_at[v as usize] = i;
        }
    }
    for l in loops {
        let body = l.marker + 1..l.end;
        for u in &uses[body.clone()] {
            for &v in &u.reads[..u.n] {
                let v = v as usize;
                if def_at[v] < l.marker && !pinned(v as u32) {
                    free_at[v] = free_at[v].max(l.end);
                }
            }
        }
        for (i, u) in uses.iter().enumerate().skip(l.end) {
            for &v in &u.reads[..u.n] {
                if body.contains(&def_at[v as usize]) && !pinned(v) {
                    return Err(format!(
                        "op {i} reads a value defined inside the loop at op {}; \
                         a loop hands values on only through its carried tiles",
                        l.marker
                    ));
                }
            }
        }
        for &v in &l.inits {
            if free_at[v as usize] != usize::MAX && free_at[v as usize] > l.marker {
                return Err(format!(
                    "a tile carried into the loop at op {} is read after the loop starts; \
                     read the loop's results instead",
                    l.marker
                ));
            }
        }
    }
    // Values whose register comes free at an op they do not read (extended past a loop).
    let mut release: Vec<Vec<u32>> = vec![Vec::new(); uses.len() + 1];
    for (v, &at) in free_at.iter().enumerate() {
        let v = v as u32;
        if at >= uses.len() || pinned(v) {
            continue;
        }
        if !uses[at].reads[..uses[at].n].contains(&v) {
            release[at].push(v);
        }
    }

    let (mut free, mut regs): (Vec<u32>, u32) = (Vec::new(), 0);
    for (i, u) in uses.iter().enumerate() {
        let reads = &u.reads[..u.n];
        for (k, &v) in reads.iter().enumerate() {
            if free_at[v as usize] == i && !pinned(v) && !reads[..k].contains(&v) {
                free.push(reg_of[v as usize]);
            }
        }
        for &v in &release[i] {
            free.push(reg_of[v as usize]);
        }
        if let Some(v) = u.out
            && !pinned(v)
        {
            let reg = free.pop().unwrap_or_else(|| {
                regs += 1;
                regs - 1
            });
            reg_of[v as usize] = reg;
            // A value nobody reads frees its register at once (its writer
            // still settles before the register is reused).
            if free_at[v as usize] == usize::MAX {
                free.push(reg);
            }
        }
    }
    let total = regs + slots;
    let total = u16::try_from(total)
        .map_err(|_| {
            format!(
                "the program needs {total} registers (at most {}); allowed: fewer tiles live at once, e.g. fewer chunks",
                u16::MAX
            )
        })?;
    let name = |v: u32| -> Reg {
        let r = reg_of[v as usize];
        (if r >= PINNED { regs + r - PINNED } else { r }) as Reg
    };
    for (op, u) in ops.iter_mut().zip(uses) {
        let ins = [0, 1].map(|k| if k < u.n { name(u.reads[k]) } else { 0 });
        let dst = u.out.map(name);
        set_regs(op, ins, dst);
    }
    for (l, base) in loops.iter().zip(bases) {
        if let Op::Loop { rot, rot_len, .. } = &mut ops[l.marker] {
            *rot = (regs + base) as Reg;
            *rot_len = l.inits.len() as u16;
        }
    }
    Ok(total)
}

fn set_regs(op: &mut Op, ins: [Reg; 2], dst: Option<Reg>) {
    let dst = || dst.expect("defines a value");
    match op {
        Op::Load { dst: d, .. } | Op::Recv { dst: d, .. } => *d = dst(),
        Op::Store { src, .. } | Op::Send { src, .. } => *src = ins[0],
        Op::Scale { dst: d, src, .. }
        | Op::Copy { dst: d, src }
        | Op::Cast { dst: d, src, .. }
        | Op::Unary { dst: d, src, .. }
        | Op::RowReduce { dst: d, src, .. } => {
            *d = dst();
            *src = ins[0];
        }
        Op::Binary { dst: d, a, b, .. }
        | Op::Gemm { dst: d, a, b, .. }
        | Op::RowBroadcast { dst: d, a, b, .. } => {
            *d = dst();
            (*a, *b) = (ins[0], ins[1]);
        }
        Op::Loop { .. } | Op::Busy { .. } => {}
    }
}
