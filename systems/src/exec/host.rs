//! Messages between the host and the PEs: neighbour-table installs, kernel
//! launches, and the payloads of remote loads and stores in flight.

use super::*;
use crate::hierarchy::Hardware;
use crate::ipcq::{Entry, NeighborTable, PeEvent, QueueAccess, Slot, SlotState};
use crate::network::{Inbox, Outbox, Purpose, Send};
use crate::program::{Launch, MemLoc, Reg, Space};
use crate::time::Clock;
use bevy_ecs::prelude::*;

/// Payloads of install and launch messages in flight from the host, and of
/// remote loads and stores in flight, keyed by their message's tag. A slot
/// is freed when its message is delivered, so the queue holds only what is
/// in flight.
#[derive(Resource, Debug, Default)]
pub struct HostQueue {
    pub installs: slab::Slab<(u32, Vec<Entry>)>,
    pub launches: slab::Slab<(u32, Launch)>,
    pub stores: slab::Slab<StoreJob>,
    pub loads: slab::Slab<LoadJob>,
    installed: rustc_hash::FxHashSet<u32>,
}

/// A load's data travelling from a remote memory.
#[derive(Debug, Clone, Copy)]
pub struct LoadJob {
    pub pe: u32,
    pub reg: Reg,
    pub trace: Option<u32>,
}

/// A store travelling to a remote memory.
#[derive(Debug, Clone, Copy)]
pub struct StoreJob {
    pub pe: u32,
    pub dst: MemLoc,
    pub bytes: u64,
    pub trace: Option<u32>,
}

/// One record per op (ADR-0052).
/// Delivery of host messages and remote memory data: installs neighbour
/// tables (creating each receive queue and its slot entities), starts
/// launched programs after the launch overhead, lands remote loads, and
/// completes remote stores through the target memory's port.
pub fn deliver_control(
    inbox: &mut Inbox,
    ka: &mut KernelAccess,
    qa: &mut QueueAccess,
    running: &Query<&PeExec>,
    commands: &mut Commands,
) {
    let now = qa.clock.now;
    let installs = inbox.take(Purpose::Install);
    for a in &installs {
        let (pe, entries) = ka.host.installs.remove(a.tag as usize);
        if !ka.host.installed.insert(pe) {
            let (s, c, p) = qa.hw.coords(pe);
            qa.errors.report(format!("sip{s}.cube{c}.pe{p}: neighbour table installed twice; install each PE once per process group"));
            continue;
        }
        let mut send_q = Vec::with_capacity(entries.len());
        let mut recv_q = Vec::with_capacity(entries.len());
        for e in &entries {
            send_q.push(qa.queues.queue(e.peer, e.peer_dir));
            let q = qa.queues.queue(pe, e.dir);
            recv_q.push(q);
            let (buffer_instance, buffer_node) = match e.buffer {
                Space::Tcm => (pe, qa.hw.pe_nodes[pe as usize]),
                space => {
                    let cube = pe / qa.hw.pes_per_cube;
                    (
                        cube,
                        qa.hw.mem_node(MemLoc {
                            space,
                            instance: cube,
                            offset: 0,
                        }),
                    )
                }
            };
            let slots = (0..e.n_slots)
                .map(|index| {
                    commands
                        .spawn(Slot {
                            queue: q,
                            index,
                            state: SlotState::Free,
                            bytes: 0,
                        })
                        .id()
                })
                .collect();
            let qu = &mut qa.queues.list[q as usize];
            qu.installed = true;
            qu.sender_pe = Some(e.peer);
            qu.buffer = e.buffer;
            qu.buffer_instance = buffer_instance;
            qu.buffer_node = buffer_node;
            qu.base = e.base;
            qu.n_slots = e.n_slots;
            qu.slot_size = e.slot_size;
            qu.slots = slots;
            qu.credits = e.n_slots;
            qa.queues.kick.push(q);
        }
        commands
            .entity(qa.hw.pes[pe as usize])
            .insert(NeighborTable {
                entries,
                send_q,
                recv_q,
            });
    }
    inbox.restore(Purpose::Install, installs);

    let launches = inbox.take(Purpose::Launch);
    for a in &launches {
        let (pe, launch) = ka.host.launches.remove(a.tag as usize);
        let entity = qa.hw.pes[pe as usize];
        if running
            .get(entity)
            .is_ok_and(|ex| ex.state == PeState::Running)
        {
            let (s, c, p) = qa.hw.coords(pe);
            qa.errors.report(format!(
                "sip{s}.cube{c}.pe{p}: launched while its previous kernel is still running"
            ));
            continue;
        }
        let start = now + ka.params.launch_overhead;
        commands
            .entity(entity)
            .insert(PeExec::new(launch.program, launch.params, start));
        ka.kcal.0.push(start, pe);
    }
    inbox.restore(Purpose::Launch, launches);

    let loads = inbox.take(Purpose::LoadData);
    for a in &loads {
        let job = ka.host.loads.remove(a.tag as usize);
        qa.trace.finish(job.trace, now);
        qa.queues.pe_events.push(PeEvent::Resolve {
            pe: job.pe,
            reg: job.reg,
            at: now,
            data: None,
        });
    }
    inbox.restore(Purpose::LoadData, loads);

    let stores = inbox.take(Purpose::StoreData);
    for a in &stores {
        let job = ka.host.stores.remove(a.tag as usize);
        let done = qa
            .ports
            .access(job.dst.space, job.dst.instance, now, job.bytes);
        qa.trace.finish(job.trace, done);
        qa.queues.pe_events.push(PeEvent::Complete {
            pe: job.pe,
            at: done,
        });
    }
    inbox.restore(Purpose::StoreData, stores);
}

/// Queues an install message per PE from the host; the table is applied when
/// the message arrives, so installs take simulated time.
pub fn send_installs(world: &mut World, tables: Vec<(u32, Vec<Entry>)>) {
    let now = world.resource::<Clock>().now;
    let entry_bytes = world.resource::<ExecParams>().install_entry_bytes;
    let host_node = world.resource::<Hardware>().host_node;
    for (pe, entries) in tables {
        let dst = world.resource::<Hardware>().pe_nodes[pe as usize];
        let bytes = entries.len().max(1) as u64 * entry_bytes;
        let tag = world
            .resource_mut::<HostQueue>()
            .installs
            .insert((pe, entries)) as u64;
        world.resource_mut::<Outbox>().send(Send {
            src: host_node,
            dst,
            bytes,
            at: now,
            purpose: Purpose::Install,
            tag,
            route: None,
        });
    }
}

/// Queues a launch message per PE from the host.
pub fn send_launches(world: &mut World, programs: Vec<(u32, Launch)>) {
    let now = world.resource::<Clock>().now;
    let bytes = world.resource::<ExecParams>().launch_bytes;
    let host_node = world.resource::<Hardware>().host_node;
    for (pe, program) in programs {
        let dst = world.resource::<Hardware>().pe_nodes[pe as usize];
        let tag = world
            .resource_mut::<HostQueue>()
            .launches
            .insert((pe, program)) as u64;
        world.resource_mut::<Outbox>().send(Send {
            src: host_node,
            dst,
            bytes,
            at: now,
            purpose: Purpose::Launch,
            tag,
            route: None,
        });
    }
}
