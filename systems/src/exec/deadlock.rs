//! Why each unfinished PE cannot go on.

use super::*;
use crate::hierarchy::Hardware;
use crate::time::Clock;
use bevy_ecs::prelude::*;

/// Why each unfinished PE cannot go on; None when every launched PE is done.
pub fn deadlock_report(world: &mut World) -> Option<String> {
    let now = world.resource::<Clock>().now;
    let mut stuck: Vec<(PeIdx, PeExec)> = Vec::new();
    let mut q = world.query::<(&crate::hierarchy::Pe, &PeExec)>();
    let hw = world.resource::<Hardware>();
    for (p, ex) in q.iter(world) {
        if ex.state == PeState::Running {
            stuck.push((hw.pe_index(p.sip, p.cube, p.index), ex.clone()));
        }
    }
    if stuck.is_empty() {
        return None;
    }
    stuck.sort_by_key(|s| s.0);
    let queues = world.resource::<crate::ipcq::Queues>();
    let name = |pe: PeIdx| {
        let (s, c, p) = hw.coords(pe);
        format!("sip{s}.cube{c}.pe{p}")
    };
    let mut out = format!(
        "deadlock at tick {now}: nothing is due and {} PE(s) have not finished\n",
        stuck.len()
    );
    for (pe, ex) in &stuck {
        let program = &ex.program;
        let at = match ex.op() {
            Some(op) => {
                let iter = ex
                    .frame
                    .map(|f| format!(", loop iteration {} of {}", f.iter + 1, f.count))
                    .unwrap_or_default();
                format!(
                    "op {} of {} ({}{iter})",
                    ex.pc,
                    program.ops.len(),
                    op.name()
                )
            }
            None => format!(
                "the end of its program ({} async op(s) and {} register(s) outstanding)",
                ex.outstanding, ex.pending_regs
            ),
        };
        out.push_str(&format!("  {}: blocked at {at}\n", name(*pe)));
        for qu in &queues.list {
            let (in_flight, full) = qu.slot_counts();
            let state = format!(
                "sender credits {}/{}, {in_flight} chunk(s) in flight, {full} full slot(s), {} credit(s) in flight",
                qu.credits, qu.n_slots, qu.credits_in_flight
            );
            let from = qu.sender_pe.map_or("no installed sender".to_string(), name);
            if qu.recvs.iter().any(|j| j.pe == *pe) {
                out.push_str(&format!(
                    "    waiting in recv on {} (queue of {} from {from}): {state}\n",
                    qu.dir.name(),
                    name(qu.receiver)
                ));
            }
            if qu.sends.iter().any(|j| j.pe == *pe) {
                let to = if qu.installed {
                    ""
                } else {
                    " (receiver not installed)"
                };
                out.push_str(&format!(
                    "    waiting in send to {} {}{to}: {state}\n",
                    name(qu.receiver),
                    qu.dir.name()
                ));
            }
        }
    }
    Some(out)
}
