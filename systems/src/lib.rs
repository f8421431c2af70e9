//! kernbench-systems: the simulated hardware as an ECS.
//!
//! Components, resources, the per-tick systems and their schedule. This crate
//! knows nothing of YAML, the CLI or collectives: the topology layer hands it a
//! [`network::LinkTable`] and a [`network::RouteSource`], and workloads talk to
//! it through [`traffic::Traffic`].

pub mod hierarchy;
pub mod network;
pub mod schedule;
pub mod time;
pub mod traffic;

pub use network::{LinkClass, LinkId, LinkStats, LinkTable, LinkTableBuilder, NodeId, RouteSource};
pub use schedule::{Engine, RunSummary, Stage};
pub use time::{Calendar, Clock, Tick};
pub use traffic::{Arrival, Injector, ScheduledTraffic, Send, Start, Traffic};
