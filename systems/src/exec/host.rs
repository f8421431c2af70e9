//! Messages between the host and the PEs: neighbour-table installs, kernel
//! launches, and the payloads of remote loads and stores in flight.

use super::*;
use crate::hierarchy::{Hardware, PeRate};
use crate::ids::PeIdx;
use crate::ipcq::{
    Entry, Neighbor, NeighborTable, NeighborTables, QueueAccess, Scope, Slot, SlotState, Tables,
};
use crate::network::{Inbox, NewMessage, Outbox, Purpose};
use crate::program::{Launch, MemLoc, Reg, Space};
use crate::time::Clock;
use bevy_ecs::prelude::*;
use rustc_hash::FxHashMap;

/// Payloads of install and launch messages in flight from the host, and of
/// remote loads and stores in flight, keyed by their message's tag. A slot
/// is freed when its message is delivered, so the queue holds only what is
/// in flight.
#[derive(Resource, Debug, Default)]
pub struct HostQueue {
    pub installs: slab::Slab<(PeIdx, Scope, Vec<Entry>)>,
    pub launches: slab::Slab<(PeIdx, Launch, Scope, LaunchId)>,
    pub stores: slab::Slab<StoreJob>,
    pub loads: slab::Slab<LoadJob>,
}

impl HostQueue {
    /// Whether no install or launch message is in flight.
    pub fn host_idle(&self) -> bool {
        self.installs.is_empty() && self.launches.is_empty()
    }

    /// For the fast-forward: what a remote load's or store's message
    /// carries, in place of its tag (a slot number, which says nothing of
    /// what happens next and differs from one period to the next).
    pub(crate) fn steady_job(&self, purpose: Purpose, tag: u64) -> Option<[u64; 4]> {
        match purpose {
            Purpose::LoadData => self
                .loads
                .get(tag as usize)
                .map(|j| [j.pe.0.into(), j.reg.into(), 0, 0]),
            Purpose::StoreData => self.stores.get(tag as usize).map(|j| {
                let loc = (j.dst.space as u64) << 32 | u64::from(j.dst.instance);
                [j.pe.0.into(), loc, j.bytes, 1]
            }),
            _ => None,
        }
    }
}

/// A load's data travelling from a remote memory.
#[derive(Debug, Clone, Copy)]
pub struct LoadJob {
    pub pe: PeIdx,
    pub reg: Reg,
    pub trace: Option<u32>,
}

/// A store travelling to a remote memory.
#[derive(Debug, Clone, Copy)]
pub struct StoreJob {
    pub pe: PeIdx,
    pub dst: MemLoc,
    pub bytes: u64,
    pub trace: Option<u32>,
}

/// Delivery of host messages and remote memory data: installs neighbour
/// tables (creating each receive queue with its slots), starts
/// launched programs after the launch overhead, lands remote loads, and
/// completes remote stores through the target memory's port.
pub fn deliver_control(
    inbox: &mut Inbox,
    ka: &mut KernelAccess,
    qa: &mut QueueAccess,
    pes: &mut Query<(Option<&mut PeExec>, Option<&mut NeighborTables>, &PeRate)>,
    commands: &mut Commands,
) {
    let now = qa.clock.now;
    let installs = inbox.take(Purpose::Install);
    // Tables of PEs wired for the first time in this call (inserted at the end).
    let mut fresh: FxHashMap<PeIdx, NeighborTables> = FxHashMap::default();
    for a in &installs {
        let (pe, scope, entries) = ka.host.installs.remove(a.tag as usize);
        let entity = qa.hw.pe_entity(pe);
        let held = |t: Option<&NeighborTables>| t.is_some_and(|t| t.get(scope).is_some());
        if held(pes.get(entity).ok().and_then(|(_, t, _)| t)) || held(fresh.get(&pe)) {
            let (s, c, p) = qa.hw.coords(pe);
            qa.errors.report(format!("sip{s}.cube{c}.pe{p}: the neighbour table of communicator scope {scope} was installed twice; install each communicator once per PE"));
            continue;
        }
        let table = install_table(pe, scope, entries, qa);
        match pes.get_mut(entity) {
            Ok((_, Some(mut tables), _)) => tables.0.push((scope, table)),
            _ => fresh.entry(pe).or_default().0.push((scope, table)),
        }
    }
    for (pe, tables) in fresh {
        commands.entity(qa.hw.pe_entity(pe)).insert(tables);
    }
    inbox.restore(Purpose::Install, installs);

    start_launches(inbox, ka, qa.clock.now, &qa.hw, pes, commands);

    let loads = inbox.take(Purpose::LoadData);
    for a in &loads {
        let job = ka.host.loads.remove(a.tag as usize);
        qa.trace.finish(job.trace, now);
        qa.pe_events.0.push(PeEvent::Resolve {
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
        qa.pe_events.0.push(PeEvent::Complete {
            pe: job.pe,
            at: done,
        });
    }
    inbox.restore(Purpose::StoreData, stores);
}

/// Starts each delivered launch on its PE after the launch overhead, or
/// queues it on the PE's `PeExec` behind the kernel it is running. A PE's
/// first `PeExec` is only inserted when the commands apply, so a PE first
/// given a program in this same delivery keeps it in `fresh` meanwhile: two
/// launches reaching one PE in the same tick (an all-ideal host route)
/// queue one behind the other instead of overwriting each other.
fn start_launches(
    inbox: &mut Inbox,
    ka: &mut KernelAccess,
    now: Tick,
    hw: &Hardware,
    pes: &mut Query<(Option<&mut PeExec>, Option<&mut NeighborTables>, &PeRate)>,
    commands: &mut Commands,
) {
    let launches = inbox.take(Purpose::Launch);
    let mut fresh: Vec<(PeIdx, PeExec)> = Vec::new();
    let mut fresh_at: FxHashMap<PeIdx, usize> = FxHashMap::default();
    for a in &launches {
        let (pe, launch, scope, id) = ka.host.launches.remove(a.tag as usize);
        // Every PE entity has a rate; a PE runs a kernel once launched.
        let (ex, overhead) = match pes.get_mut(hw.pe_entity(pe)) {
            Ok((ex, _, rate)) => (ex, rate.launch_overhead),
            Err(_) => (None, 0),
        };
        let queued = QueuedLaunch {
            launch,
            scope,
            id,
            ready: now + overhead,
        };
        let ex = match fresh_at.get(&pe) {
            Some(&i) => Some(&mut fresh[i].1),
            None => ex.map(Mut::into_inner),
        };
        let start = match ex.as_ref().map(|ex| ex.state) {
            // One kernel at a time: the launch waits for the running one.
            Some(PeState::Running) => {
                ex.expect("a running PE has its state")
                    .queued
                    .push_back(queued);
                continue;
            }
            Some(PeState::Done(t)) => queued.ready.max(t),
            None => queued.ready,
        };
        match ex {
            Some(ex) => *ex = PeExec::new(queued, start),
            None => {
                fresh_at.insert(pe, fresh.len());
                fresh.push((pe, PeExec::new(queued, start)));
            }
        }
        ka.kcal.0.push(start, pe);
    }
    for (pe, ex) in fresh {
        commands.entity(hw.pe_entity(pe)).insert(ex);
    }
    inbox.restore(Purpose::Launch, launches);
}

/// Creates the receive queues of one PE's table for `scope` (their slots
/// free) and resolves the queues it sends into.
fn install_table(
    pe: PeIdx,
    scope: Scope,
    entries: Vec<Entry>,
    qa: &mut QueueAccess,
) -> NeighborTable {
    let mut neighbors = Vec::with_capacity(entries.len());
    for e in &entries {
        let q = qa.queues.queue(pe, scope, e.dir);
        neighbors.push(Neighbor {
            entry: *e,
            send_q: qa.queues.queue(e.peer, scope, e.peer_dir),
            recv_q: q,
        });
        let (buffer_instance, buffer_node) = match e.buffer {
            Space::Tcm => (pe.0, qa.hw.pe_node(pe)),
            space => {
                let cube = qa.hw.cube_of(pe);
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
        let free = Slot {
            state: SlotState::Free,
            bytes: 0,
        };
        let qu = &mut qa.queues.list[q.index()];
        qu.installed = true;
        qu.sender_pe = Some(e.peer);
        qu.buffer = e.buffer;
        qu.buffer_instance = buffer_instance;
        qu.buffer_node = buffer_node;
        qu.base = e.base;
        qu.n_slots = e.n_slots;
        qu.slot_size = e.slot_size;
        qu.slots = vec![free; e.n_slots as usize];
        qu.credits = e.n_slots;
        qa.queues.kick.push(q);
    }
    NeighborTable { neighbors }
}

/// Queues an install message per PE from the host; the table is applied when
/// the message arrives, so installs take simulated time.
pub fn send_installs(world: &mut World, scope: Scope, tables: Tables, at: Tick) {
    let now = world.resource::<Clock>().now.max(at);
    let entry_bytes = world.resource::<ExecParams>().install_entry_bytes;
    let host_node = world.resource::<Hardware>().host_node;
    for (pe, entries) in tables {
        let dst = world.resource::<Hardware>().pe_node(pe);
        let bytes = entries.len().max(1) as u64 * entry_bytes;
        let tag = world
            .resource_mut::<HostQueue>()
            .installs
            .insert((pe, scope, entries)) as u64;
        world.resource_mut::<Outbox>().send(NewMessage {
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

/// Queues a launch message per PE from the host, leaving at `at` (or now,
/// if later); returns the launch's handle.
pub fn send_launches(
    world: &mut World,
    scope: Scope,
    programs: Vec<(PeIdx, Launch)>,
    at: Tick,
) -> LaunchId {
    let now = world.resource::<Clock>().now.max(at);
    let id = world.resource_mut::<Launches>().open(programs.len() as u32);
    let bytes = world.resource::<ExecParams>().launch_bytes;
    let host_node = world.resource::<Hardware>().host_node;
    for (pe, program) in programs {
        let dst = world.resource::<Hardware>().pe_node(pe);
        let tag = world
            .resource_mut::<HostQueue>()
            .launches
            .insert((pe, program, scope, id)) as u64;
        world.resource_mut::<Outbox>().send(NewMessage {
            src: host_node,
            dst,
            bytes,
            at: now,
            purpose: Purpose::Launch,
            tag,
            route: None,
        });
    }
    id
}
