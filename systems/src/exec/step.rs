//! The `kernel_step` stage: PEs woken now issue ops in program order until they block.

use super::issue::{IssueCtx, issue};
use super::*;
use crate::hierarchy::PeRate;
use crate::ipcq::{NeighborTable, NeighborTables, QueueAccess};
use crate::memory::DataMode;
use bevy_ecs::prelude::*;

/// The `kernel_step` stage: applies queue results to PEs, then lets every PE
/// woken now issue ops until it blocks. PEs woken in the same tick step in PE
/// index order.
pub fn kernel_step(
    mut pes: Query<(&mut PeExec, Option<&NeighborTables>, &PeRate)>,
    mut ka: KernelAccess,
    mut qa: QueueAccess,
) {
    let now = qa.clock.now;
    let mut woken: Vec<PeIdx> = ka.kcal.0.take_due(now).unwrap_or_default();
    // Events are drained from a swapped-out list, so neither list loses its
    // allocation between ticks.
    let mut events = Vec::new();
    loop {
        std::mem::swap(&mut events, &mut qa.pe_events.0);
        for ev in events.drain(..) {
            let (pe, reg, at) = match ev {
                PeEvent::Resolve { pe, reg, at, .. } => (pe, Some(reg), at),
                PeEvent::Complete { pe, at } => (pe, None, at),
            };
            let Ok((mut ex, _, _)) = pes.get_mut(qa.hw.pe_entity(pe)) else {
                continue;
            };
            match ev {
                PeEvent::Resolve { reg, data, .. } => {
                    let r = &mut ex.regs[reg as usize];
                    r.ready_at = at;
                    if let Some(data) = data {
                        r.data = Some(data.into());
                    }
                    ex.pending_regs -= 1;
                }
                PeEvent::Complete { .. } => ex.outstanding -= 1,
            }
            ex.finish = ex.finish.max(at);
            // Wake the PE only if it waits for this: its current op touches the
            // register, or it has issued everything and waits to finish.
            let waits = match (ex.next_regs(), reg) {
                (None, _) => true,
                (Some((inputs, n, output)), Some(reg)) => {
                    inputs[..n].contains(&reg) || output == Some(reg)
                }
                (Some(_), None) => false,
            };
            if !waits {
                continue;
            }
            if at > now {
                ka.kcal.0.push(at, pe);
            } else {
                woken.push(pe);
            }
        }
        if woken.is_empty() {
            break;
        }
        woken.sort_unstable();
        woken.dedup();
        for pe in woken.drain(..) {
            let Ok((mut ex, tables, rate)) = pes.get_mut(qa.hw.pe_entity(pe)) else {
                continue;
            };
            let table = tables.and_then(|t| t.get(ex.scope));
            if let Err(e) = step(pe, &mut ex, table, *rate, &mut ka, &mut qa) {
                qa.errors.report(e);
                return;
            }
        }
    }
    if qa.pe_events.0.is_empty() {
        qa.pe_events.0 = events;
    }
    ka.kcal.0.recycle(woken);
}

/// Issues ops of one PE until it blocks or finishes.
fn step(
    pe: PeIdx,
    ex: &mut PeExec,
    table: Option<&NeighborTable>,
    rate: PeRate,
    ka: &mut KernelAccess,
    qa: &mut QueueAccess,
) -> Result<(), String> {
    let now = qa.clock.now;
    if ex.state != PeState::Running {
        return Ok(());
    }
    let KernelAccess {
        kcal,
        issued,
        mode,
        store,
        host,
        launches,
        steady,
    } = ka;
    let mut ic = IssueCtx {
        rate,
        functional: **mode == DataMode::Functional,
        store,
        host,
    };
    while let Some(op) = ex.op() {
        let (inputs, n) = op.inputs();
        for &r in inputs[..n].iter().chain(op.output().as_ref()) {
            match ex.regs[r as usize].ready_at {
                PENDING => return Ok(()),
                t if t > now => {
                    kcal.0.push(t, pe);
                    return Ok(());
                }
                _ => {}
            }
        }
        issue(pe, ex, &op, table, &mut ic, qa).map_err(|e| {
            let (s, c, p) = qa.hw.coords(pe);
            format!("sip{s}.cube{c}.pe{p}: op {} ({}): {e}", ex.pc, op.name())
        })?;
        match ex.advance() {
            LoopMove::Within => {}
            LoopMove::NextIteration => steady.iteration(pe),
            LoopMove::Left => steady.loop_left(pe),
        }
        issued.0 += 1;
    }
    if ex.outstanding == 0 && ex.pending_regs == 0 {
        let done = ex.finish.max(ex.started);
        ex.state = PeState::Done(done);
        launches.pe_done(ex.launch, ex.started, done);
        // The PE's next queued launch starts once this one is done.
        if let Some(next) = ex.queued.pop_front() {
            let start = next.ready.max(done);
            let queued = std::mem::take(&mut ex.queued);
            *ex = PeExec::new(next, start);
            ex.queued = queued;
            kcal.0.push(start, pe);
        }
    }
    Ok(())
}
