//! Kernel execution: launch, the `kernel_step` stage, remote load/store data,
//! the op log and the deadlock report.
//!
//! Each launched PE runs its op program in order. An op issues when its input
//! registers hold their values and its output register is settled; compute
//! ops occupy the PE's vector unit or MAC array (FIFO, like a link), loads and
//! stores its memory ports, sends and recvs its queues. Sends, recvs and
//! remote memory ops run asynchronously: the PE goes on to the next op, and a
//! register written by a recv or remote load is *pending* until it lands.
//!
//! Files: `step` (the stage: waking PEs and issuing in order), `issue` (what
//! each op costs and does), `host` (install and launch messages from the host,
//! remote load/store payloads), `deadlock` (the report of a run that cannot
//! finish). The op log is `crate::oplog`.

mod deadlock;
mod host;
mod issue;
mod step;

pub use deadlock::deadlock_report;
pub use host::{HostQueue, LoadJob, StoreJob, deliver_control, send_installs, send_launches};
pub use step::kernel_step;

use crate::memory::{DataMode, MemoryStore};
use crate::program::Program;
use crate::time::{Calendar, Tick};
use bevy_ecs::prelude::*;
use half::f16;
use std::sync::Arc;

/// `ready_at` of a register whose value has not landed yet.
pub const PENDING: Tick = Tick::MAX;

/// A register: when its value is usable, its size, and (functional mode) the values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegState {
    pub ready_at: Tick,
    pub elems: u64,
    pub data: Option<Vec<f16>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeState {
    Running,
    /// Finished; the tick at which its last op completed.
    Done(Tick),
}

/// Ops issued by every PE so far: progress, for the engine's watchdog.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpsIssued(pub u64);

/// Execution state of a launched PE.
#[derive(Component, Debug, Clone)]
pub struct PeExec {
    /// The launched program (many PEs share one; it is freed when the last
    /// PE running it is launched again or despawned).
    pub program: Arc<Program>,
    pub pc: u32,
    pub regs: Vec<RegState>,
    pub vector_free: Tick,
    pub mac_free: Tick,
    /// Sends and remote stores not yet complete.
    pub outstanding: u32,
    /// Registers waiting for a recv or remote load.
    pub pending_regs: u32,
    /// Latest completion tick seen.
    pub finish: Tick,
    pub started: Tick,
    pub state: PeState,
}

/// PE throughput and control-message sizes, in ticks and bytes.
#[derive(Resource, Debug, Clone)]
pub struct ExecParams {
    pub vector_lanes: u64,
    pub macs_per_tick: u64,
    pub launch_overhead: Tick,
    pub launch_bytes: u64,
    pub install_entry_bytes: u64,
}

impl Default for ExecParams {
    fn default() -> Self {
        Self {
            vector_lanes: 1,
            macs_per_tick: 1,
            launch_overhead: 0,
            launch_bytes: 1,
            install_entry_bytes: 1,
        }
    }
}

/// PE wake-ups by tick.
#[derive(Resource, Debug, Default)]
pub struct KernelCalendar(pub Calendar<u32>);

/// Everything `kernel_step` needs besides the PEs.
#[derive(bevy_ecs::system::SystemParam)]
pub struct KernelAccess<'w> {
    pub kcal: ResMut<'w, KernelCalendar>,
    pub issued: ResMut<'w, OpsIssued>,
    pub params: Res<'w, ExecParams>,
    pub mode: Res<'w, DataMode>,
    pub store: ResMut<'w, MemoryStore>,
    pub host: ResMut<'w, HostQueue>,
}
