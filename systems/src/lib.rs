//! kernbench-systems: the simulated hardware as an ECS.
//!
//! Components, resources, the per-tick systems and their schedule. This crate
//! knows nothing of YAML, the CLI or collectives: the topology layer hands it a
//! [`network::LinkTable`], a [`network::RouteSource`] and the hardware shape;
//! workloads talk to it through [`traffic::Traffic`] or by installing
//! neighbour tables and launching op programs.

pub mod dtype;
pub mod exec;
pub mod heap;
pub mod hierarchy;
pub mod ids;
pub mod ipcq;
pub mod memory;
pub mod network;
pub mod plugin;
pub mod prefetch;
pub mod program;
pub mod schedule;
pub mod steady;
pub mod time;
pub mod trace;
pub mod traffic;
pub mod watch;

use bevy_ecs::prelude::Resource;

pub use dtype::DType;
pub use ids::PeIdx;
pub use network::{LinkClass, LinkId, LinkStats, LinkTable, LinkTableBuilder, NodeId, RouteSource};
pub use schedule::{Engine, RunError, RunLimits, RunSummary, Stage};
pub use time::{Calendar, Clock, Tick};
pub use traffic::{Arrival, Injector, ScheduledTraffic, Start, Traffic, TrafficMessage};

/// The first error met during a run; the run stops at the end of that tick.
#[derive(Resource, Debug, Default)]
pub struct RunErrors {
    pub first: Option<String>,
}

impl RunErrors {
    pub fn report(&mut self, e: impl Into<String>) {
        self.first.get_or_insert(e.into());
    }
}
