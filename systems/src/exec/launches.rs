//! Launches as the host sees them: each submitted kernel is one launch over
//! a set of PEs, with a record of when its PEs started and finished. A PE
//! that is still running queues later launches on its own `PeExec`, in
//! arrival order (a stream: one kernel at a time per PE).

use crate::ipcq::Scope;
use crate::program::Launch;
use crate::time::Tick;
use bevy_ecs::prelude::*;

/// A launch's handle: its slot in [`Launches::records`].
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaunchId(pub u32);

/// Progress of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchRecord {
    /// PEs the launch runs on, and how many of them have finished.
    pub pes: u32,
    pub done: u32,
    /// Earliest start of its programs (after the launch overhead), and the
    /// latest completion; valid once `done == pes`.
    pub start: Tick,
    pub end: Tick,
}

impl LaunchRecord {
    pub fn finished(&self) -> bool {
        self.done == self.pes
    }
}

/// A launch that reached its PE: what to run, under which scope, and from
/// when (arrival plus the launch overhead).
#[derive(Debug, Clone)]
pub struct QueuedLaunch {
    pub launch: Launch,
    pub scope: Scope,
    pub id: LaunchId,
    pub ready: Tick,
}

/// Every launch not yet collected by the host. A record is freed when the
/// host takes it.
#[derive(Resource, Debug, Default)]
pub struct Launches {
    pub records: slab::Slab<LaunchRecord>,
}

impl Launches {
    /// Opens the record of a launch over `pes` PEs.
    pub fn open(&mut self, pes: u32) -> LaunchId {
        LaunchId(self.records.insert(LaunchRecord {
            pes,
            done: 0,
            start: Tick::MAX,
            end: 0,
        }) as u32)
    }

    /// Notes that one PE of launch `id` ran from `start` to `end`.
    pub fn pe_done(&mut self, id: LaunchId, start: Tick, end: Tick) {
        if let Some(r) = self.records.get_mut(id.0 as usize) {
            r.done += 1;
            r.start = r.start.min(start);
            r.end = r.end.max(end);
        }
    }

    /// The record of launch `id`, if it is still held.
    pub fn get(&self, id: LaunchId) -> Option<&LaunchRecord> {
        self.records.get(id.0 as usize)
    }

    /// Whether launch `id` has finished (a record already taken has).
    pub fn finished(&self, id: LaunchId) -> bool {
        self.get(id).is_none_or(|r| r.finished())
    }

    /// Removes a record (the host has read it); its id may be reused.
    pub fn take(&mut self, id: LaunchId) -> Option<LaunchRecord> {
        self.records.try_remove(id.0 as usize)
    }
}
